/* The init process of every pod sandbox on the real-node tier (image mlsandbox/pause): it keeps the pod's
 * namespaces alive, reaps the orphans the pod's containers leave to it, and exits on SIGINT or SIGTERM.
 * Built statically (gcc -Os -static) so that its image needs nothing else. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigemptyset(&stop.sa_mask);
  sigemptyset(&child.sa_mask);
  if (sigaction(SIGINT, &stop, NULL) || sigaction(SIGTERM, &stop, NULL) || sigaction(SIGCHLD, &child, NULL)) {
    return 1;
  }
  for (;;) {
    pause();
  }
}
