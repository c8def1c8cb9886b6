"""The first program of a workspace's sandbox (run as its unprivileged uid, inside its namespaces, with
``python -I -S``; standard library only).

``boot.py FORWARDS MAX_PROCS MAX_FILE_BYTES PYTHON SCRIPT [ARGS...]``: ``FORWARDS`` is a JSON object
``{"<port>": "<unix socket path>"}``. Listens on ``127.0.0.1:<port>`` for each (the namespace's own
loopback), forks a relay that carries each connection to its Unix socket (the host side connects it to
the sandbox's service), sets the process and file-size limits, then ``exec``s ``PYTHON SCRIPT ARGS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _serve(conn: socket.socket, path: str) -> None:
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        return
    threading.Thread(target=_pump, args=(up, conn), daemon=True).start()
    _pump(conn, up)


def _accept(server: socket.socket, path: str) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, path), daemon=True).start()


def main(argv: list[str]) -> None:
    forwards = json.loads(argv[1])
    max_procs, max_file = int(argv[2]), int(argv[3])
    command = argv[4:]
    servers = []
    for port, path in forwards.items():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", int(port)))
        s.listen(128)
        servers.append((s, path))
    if os.fork() == 0:  # the relay: lives until the namespace's first process ends
        threads = [threading.Thread(target=_accept, args=sp, daemon=True) for sp in servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        os._exit(0)
    for s, _ in servers:
        s.close()
    if max_procs > 0:  # per uid: only when the workspace has a uid of its own
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file, max_file))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
