/* `pause COMMAND [ARG...]`: stop until SIGCONT arrives, then run COMMAND.
 *
 * chaos-daemon starts a stressor through /usr/local/bin/pause so that it can move the process into the
 * target container's cgroup before the stressor runs: it reads /proc/PID/comm and keeps sending SIGCONT
 * while the name is still "pause". Written for the mlsandbox chaos-daemon image (workloads/Dockerfile.chaos-daemon).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t resumed = 0;

static void on_continue(int sig) {
  (void)sig;
  resumed = 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: pause COMMAND [ARG...]\n");
    return 2;
  }
  sigset_t cont, waiting;
  sigemptyset(&cont);
  sigaddset(&cont, SIGCONT);
  sigprocmask(SIG_BLOCK, &cont, &waiting); /* no SIGCONT is lost between the test and the wait */
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_continue;
  sigaction(SIGCONT, &action, NULL);
  sigdelset(&waiting, SIGCONT);
  while (!resumed) sigsuspend(&waiting);
  sigprocmask(SIG_UNBLOCK, &cont, NULL);
  execvp(argv[1], argv + 1);
  fprintf(stderr, "pause: cannot run %s: %s\n", argv[1], strerror(errno));
  return 127;
}
