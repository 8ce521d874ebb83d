/* SPDX-License-Identifier: Apache-2.0
 *
 * pause - the cluster lane's pod sandbox process (the role of registry.k8s.io/pause): holds the
 * pod's namespaces, reaps orphans (it is PID 1 of the pod when the PID namespace is shared),
 * exits 0 on TERM or INT. Built static; the image holds this file alone.
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_chld(int sig)
{
	int saved = errno;

	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

int main(void)
{
	struct sigaction sa = { 0 };

	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = on_chld;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	for (;;)
		pause();
}
