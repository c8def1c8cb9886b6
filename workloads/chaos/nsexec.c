/* `nsexec [-l] [-m PATH] [-n PATH] [-i PATH] [-p PATH] -- COMMAND [ARG...]`: run COMMAND in the given
 * namespaces (PATH is a namespace file, /proc/PID/ns/TYPE), as chaos-daemon's background process manager
 * calls /usr/local/bin/nsexec. Joining a PID namespace takes effect for children only, so COMMAND runs in
 * a child; this process waits for it, passes SIGTERM, SIGINT and SIGHUP on, and exits as it did. The child
 * dies with this process (PR_SET_PDEATHSIG), so killing what chaos-daemon started stops COMMAND too.
 * `-l` (keep the daemon's own mount namespace for a preloaded library) is accepted and has no effect: no
 * library is preloaded here. Written for the mlsandbox chaos-daemon image.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child = -1;

static void pass_on(int sig) {
  if (child > 0) kill(child, sig);
}

static int join(const char *path, int type) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, type) != 0) {
    fprintf(stderr, "nsexec: cannot join %s: %s\n", path, strerror(errno));
    return -1;
  }
  close(fd);
  return 0;
}

int main(int argc, char **argv) {
  /* Mount first would hide /proc/PID/ns of the others: join the mount namespace last. */
  const char *mnt = NULL, *net = NULL, *ipc = NULL, *pid = NULL;
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *flag = argv[i];
    if (strcmp(flag, "-l") == 0) continue;
    if (i + 1 >= argc || flag[0] != '-' || strlen(flag) != 2) {
      fprintf(stderr, "nsexec: unexpected argument %s\n", flag);
      return 2;
    }
    const char *path = argv[++i];
    switch (flag[1]) {
      case 'm': mnt = path; break;
      case 'n': net = path; break;
      case 'i': ipc = path; break;
      case 'p': pid = path; break;
      default:
        fprintf(stderr, "nsexec: unsupported namespace flag %s\n", flag);
        return 2;
    }
  }
  if (i + 1 >= argc) {
    fprintf(stderr, "usage: nsexec [-l] [-m|-n|-i|-p PATH]... -- COMMAND [ARG...]\n");
    return 2;
  }
  char **command = argv + i + 1;
  if ((net && join(net, CLONE_NEWNET)) || (ipc && join(ipc, CLONE_NEWIPC)) ||
      (pid && join(pid, CLONE_NEWPID)) || (mnt && join(mnt, CLONE_NEWNS)))
    return 125;

  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = pass_on;
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGHUP, &action, NULL);
  /* The child cannot watch its parent by pid: once in another PID namespace getppid() is 0. It watches a
   * pipe whose write end only this process holds: a hang-up means this process is gone. */
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) != 0) {
    fprintf(stderr, "nsexec: pipe: %s\n", strerror(errno));
    return 125;
  }
  child = fork();
  if (child < 0) {
    fprintf(stderr, "nsexec: fork: %s\n", strerror(errno));
    return 125;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(alive[1]);
    struct pollfd gone = {.fd = alive[0], .events = POLLIN};
    if (poll(&gone, 1, 0) != 0) _exit(125); /* the parent died before the line above */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    execvp(command[0], command);
    fprintf(stderr, "nsexec: cannot run %s: %s\n", command[0], strerror(errno));
    _exit(127);
  }
  close(alive[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 125;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
