/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel floor of the loop attach cycle (make bench, tests/bench/cycle.py):
 * the kernel operations one cycle needs, done by one static program without
 * the driver, each timed:
 *
 *   bind         LOOP_CTL_GET_FREE + LOOP_CONFIGURE of the image (direct I/O,
 *                released by the kernel at its last close)
 *   mount        the ext4 filesystem on the device, read-write
 *   bindmount    a bind mount of it (the pod's)
 *   umount_bind  the pod's umount
 *   umount       the device's umount, which releases the binding
 *
 * Usage: kfloor IMAGE DEVICE-MOUNT-DIR POD-DIR (as root, in a private mount
 * namespace).  Prints {"status":"Success","bind":ms,...} or a Failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int fail(const char *what)
{
	printf("{\"status\":\"Failure\",\"message\":\"%s: %s\"}\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	struct loop_config lc = { 0 };
	double t[6];
	char dev[32];
	int ctl, img, lfd, nr;

	if (argc != 4) {
		printf("{\"status\":\"Failure\",\"message\":\"usage: kfloor IMAGE GMP POD\"}\n");
		return 1;
	}
	t[0] = now_ms();
	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	img = open(argv[1], O_RDWR | O_CLOEXEC);
	if (ctl < 0 || img < 0)
		return fail("open");
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	if (nr < 0)
		return fail("LOOP_CTL_GET_FREE");
	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	lfd = open(dev, O_RDWR | O_CLOEXEC);
	if (lfd < 0)
		return fail(dev);
	lc.fd = (unsigned int)img;
	lc.info.lo_flags = LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR;
	snprintf((char *)lc.info.lo_file_name, LO_NAME_SIZE, "kfloor");
	if (ioctl(lfd, LOOP_CONFIGURE, &lc) < 0)
		return fail("LOOP_CONFIGURE");
	t[1] = now_ms();
	if (mount(dev, argv[2], "ext4", 0, NULL) < 0) {
		close(lfd); /* released */
		return fail("mount");
	}
	close(lfd);
	t[2] = now_ms();
	if (mount(argv[2], argv[3], NULL, MS_BIND, NULL) < 0)
		return fail("bind mount");
	t[3] = now_ms();
	if (umount2(argv[3], UMOUNT_NOFOLLOW) < 0)
		return fail("umount pod");
	t[4] = now_ms();
	if (umount2(argv[2], UMOUNT_NOFOLLOW) < 0)
		return fail("umount device");
	t[5] = now_ms();
	printf("{\"status\":\"Success\",\"bind\":%.3f,\"mount\":%.3f,\"bindmount\":%.3f,"
	       "\"umount_bind\":%.3f,\"umount\":%.3f}\n",
	       t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[5] - t[4]);
	return 0;
}
