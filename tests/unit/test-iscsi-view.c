/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The iSCSI driver's view of sessions and LUN disks (drivers/iscsi/sysfs.c)
 * and its logout decision, against sysfs trees laid out the way the kernel's
 * scsi_transport_iscsi lays them out:
 *
 *   devices/platform/hostH/sessionS/iscsi_session/sessionS/{targetname,state}
 *   devices/platform/hostH/sessionS/targetH:0:0/H:0:0:L/block/sdX/{dev,uevent,holders/}
 *   class/iscsi_session/sessionS, class/block/sdX, dev/block/M:m   (symlinks)
 *
 * libudev reads /sys and nothing else, so each test runs in a private mount
 * namespace with such a tree on a tmpfs mounted over /sys, and with
 * SYSTEMD_DEVICE_VERIFY_SYSFS=0 (libudev otherwise refuses a /sys that is not
 * sysfs) - the way systemd's own udev tests run on a fake sysfs; device nodes
 * go below FLEXVOL_DEV_ROOT.  Needs root; skipped otherwise (a failure with
 * CI=true).
 */
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"
#include "../../drivers/iscsi/sysfs.c"

static int in_use_real(const struct iscsi_disk *dk, void *arg, char *why, size_t len)
{
	return iscsi_disk_in_use(dk, why, len);
}

#define FAKE_MAJOR 135 /* an sd major no disk of this machine uses (checked below) */
#define T1 "iqn.2024-01.io.flexvol.test:target1"
#define T2 "iqn.2024-01.io.flexvol.test:target2"

static char devroot[64];

static bool put(const char *path, const char *text)
{
	char dir[PATH_MAX];
	int fd;

	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	if (fv_mkdir_p(dir, 0755) < 0)
		return false;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return false;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		close(fd);
		return false;
	}
	return close(fd) == 0;
}

/* a symlink at @at pointing to /sys/@target, written relative like the kernel's */
static bool link_to(const char *at, const char *target)
{
	char dir[PATH_MAX], rel[PATH_MAX] = "";
	int depth = 0;

	snprintf(dir, sizeof(dir), "%s", at);
	*strrchr(dir, '/') = '\0';
	if (fv_mkdir_p(dir, 0755) < 0)
		return false;
	for (const char *p = at + strlen("/sys/"); *p; p++)
		depth += *p == '/';
	for (int i = 0; i < depth; i++)
		strcat(rel, "../");
	strcat(rel, target);
	return symlink(rel, at) == 0;
}

static bool add_session(int host, int sid, const char *target, const char *state)
{
	char p[PATH_MAX], t[PATH_MAX], text[256];

	snprintf(t, sizeof(t), "devices/platform/host%d", host);
	snprintf(p, sizeof(p), "/sys/%s/uevent", t);
	if (access(p, F_OK) != 0 && !put(p, ""))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/session%d/uevent", t, sid);
	if (!put(p, "DEVTYPE=iscsi_session\n"))
		return false;
	snprintf(t, sizeof(t), "devices/platform/host%d/session%d/iscsi_session/session%d", host, sid,
		 sid);
	snprintf(p, sizeof(p), "/sys/%s/uevent", t);
	if (!put(p, ""))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/targetname", t);
	snprintf(text, sizeof(text), "%s\n", target);
	if (!put(p, text))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/state", t);
	snprintf(text, sizeof(text), "%s\n", state);
	if (!put(p, text))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/subsystem", t);
	if (!link_to(p, "class/iscsi_session"))
		return false;
	snprintf(p, sizeof(p), "/sys/class/iscsi_session/session%d", sid);
	return link_to(p, t);
}

/* LUN @lun of session @sid on host @host; a disk sdX with minor @minor unless @minor < 0 */
static bool add_lun(int host, int sid, unsigned int lun, int minor)
{
	char p[PATH_MAX], t[PATH_MAX], sd[PATH_MAX], name[32], text[128];

	snprintf(t, sizeof(t), "devices/platform/host%d/session%d/target%d:0:0", host, sid, host);
	snprintf(p, sizeof(p), "/sys/%s/uevent", t);
	if (access(p, F_OK) != 0 && (!put(p, "DEVTYPE=scsi_target\n")))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/subsystem", t);
	if (access(p, F_OK) != 0 && !link_to(p, "bus/scsi"))
		return false;
	snprintf(sd, sizeof(sd), "%s/%d:0:0:%u", t, host, lun);
	snprintf(p, sizeof(p), "/sys/%s/uevent", sd);
	if (!put(p, "DEVTYPE=scsi_device\n"))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/subsystem", sd);
	if (!link_to(p, "bus/scsi"))
		return false;
	if (minor < 0)
		return true; /* a LUN without a disk (tgt's LUN 0 is a controller) */
	snprintf(name, sizeof(name), "sdx%d", minor);
	snprintf(t, sizeof(t), "%s/block/%s", sd, name);
	snprintf(p, sizeof(p), "/sys/%s/uevent", t);
	snprintf(text, sizeof(text), "MAJOR=%d\nMINOR=%d\nDEVNAME=%s\nDEVTYPE=disk\n", FAKE_MAJOR,
		 minor, name);
	if (!put(p, text))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/dev", t);
	snprintf(text, sizeof(text), "%d:%d\n", FAKE_MAJOR, minor);
	if (!put(p, text))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/holders", t);
	if (fv_mkdir_p(p, 0755) < 0)
		return false;
	snprintf(p, sizeof(p), "/sys/%s/size", t);
	snprintf(text, sizeof(text), "%d\n", 2048 * minor); /* minor MiB */
	if (!put(p, text))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/device", t);
	if (!link_to(p, sd))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/rescan", sd);
	if (!put(p, ""))
		return false;
	snprintf(p, sizeof(p), "/sys/%s/subsystem", t);
	if (!link_to(p, "class/block"))
		return false;
	snprintf(p, sizeof(p), "/sys/class/block/%s", name);
	if (!link_to(p, t))
		return false;
	snprintf(p, sizeof(p), "/sys/dev/block/%d:%d", FAKE_MAJOR, minor);
	if (!link_to(p, t))
		return false;
	snprintf(p, sizeof(p), "%s/%s", devroot, name);
	return mknod(p, S_IFBLK | 0600, makedev(FAKE_MAJOR, minor)) == 0;
}

/*
 * The tree of these tests: session 1 (host 2) to T1, LOGGED_IN, LUN 0 (no
 * disk) and LUNs 1..128; session 3 (host 4) to T1 as well, FAILED, LUN 5;
 * session 2 (host 3) to T2, LUN 1.
 */
static bool fake_sysfs(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("fakesys", "/sys", "tmpfs", 0, "mode=0755") < 0)
		return false;
	snprintf(devroot, sizeof(devroot), "/sys/.dev"); /* nodes on the same tmpfs */
	if (fv_mkdir_p("/sys/bus/scsi", 0755) < 0 || fv_mkdir_p("/sys/class/block", 0755) < 0 ||
	    fv_mkdir_p(devroot, 0755) < 0)
		return false;
	setenv("FLEXVOL_DEV_ROOT", devroot, 1);
	/* libudev accepts only sysfs unless told otherwise: systemd's own test switch */
	setenv("SYSTEMD_DEVICE_VERIFY_SYSFS", "0", 1);
	if (!add_session(2, 1, T1, "LOGGED_IN") || !add_lun(2, 1, 0, -1))
		return false;
	for (unsigned int lun = 1; lun <= 128; lun++)
		if (!add_lun(2, 1, lun, (int)lun))
			return false;
	if (!add_session(4, 3, T1, "FAILED") || !add_lun(4, 3, 5, 200))
		return false;
	return add_session(3, 2, T2, "LOGGED_IN") && add_lun(3, 2, 1, 210);
}

static bool fake_major_unused(void)
{
	char want[32];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool used = false;

	snprintf(want, sizeof(want), " %d:", FAKE_MAJOR);
	while (f && fgets(line, sizeof(line), f))
		used |= strstr(line, want) != NULL;
	if (f)
		fclose(f);
	return !used;
}

#define SETUP()                                                                                    \
	do {                                                                                       \
		if (geteuid() != 0)                                                                \
			SKIP("needs root: a private mount namespace with a tree on /sys");         \
		REQUIRE(fake_major_unused());                                                      \
		REQUIRE(fake_sysfs());                                                             \
	} while (0)

/* tests fork: each gets its own namespace, the parent's /sys stays the real one */
#define IN_CHILD(body)                                                                             \
	do {                                                                                       \
		pid_t pid = fork();                                                                \
		int st;                                                                            \
		if (pid == 0) {                                                                    \
			body;                                                                      \
			_exit(unit_cur_failed ? 1 : unit_cur_skipped ? 77 : 0);                    \
		}                                                                                  \
		REQUIRE(pid > 0 && waitpid(pid, &st, 0) == pid);                                   \
		if (WIFEXITED(st) && WEXITSTATUS(st) == 77)                                        \
			SKIP("skipped in the child");                                              \
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);                                      \
	} while (0)

static void view_all_sessions_and_disks_body(void)
{
	struct iscsi_view v;

	SETUP();
	REQUIRE_INT(iscsi_view_load(&v, T1), 0);
	CHECK_INT((int)v.nsessions, 2);
	CHECK_INT((int)v.ndisks, 129); /* 128 on session 1, LUN 5 on session 3: no limit */
	iscsi_view_free(&v);
	/* target names compare without case */
	REQUIRE_INT(iscsi_view_load(&v, "IQN.2024-01.IO.FLEXVOL.TEST:TARGET1"), 0);
	CHECK_INT((int)v.ndisks, 129);
	iscsi_view_free(&v);
	REQUIRE_INT(iscsi_view_load(&v, NULL), 0);
	CHECK_INT((int)v.nsessions, 3);
	CHECK_INT((int)v.ndisks, 130);
	iscsi_view_free(&v);
	REQUIRE_INT(iscsi_view_load(&v, "iqn.2024-01.io.flexvol.test:nosuch"), 0);
	CHECK_INT((int)v.nsessions, 0);
	CHECK(!iscsi_view_logged_in(&v));
	iscsi_view_free(&v);
}

TEST(view_all_sessions_and_disks)
{
	IN_CHILD(view_all_sessions_and_disks_body());
}

static void view_lun_body(void)
{
	struct iscsi_view v;
	const struct iscsi_disk *dk;
	char iqn[256];
	unsigned int lun = 0;

	SETUP();
	REQUIRE_INT(iscsi_view_load(&v, T1), 0);
	CHECK(iscsi_view_logged_in(&v));
	dk = iscsi_view_lun(&v, 128);
	REQUIRE(dk != NULL);
	CHECK_STR(dk->name, "sdx128");
	CHECK_INT(dk->sid, 1);
	/* LUN 5 is on both sessions; only the logged-in one counts */
	dk = iscsi_view_lun(&v, 5);
	REQUIRE(dk != NULL);
	CHECK_INT(dk->sid, 1);
	CHECK(iscsi_view_lun(&v, 0) == NULL);	/* no disk */
	CHECK(iscsi_view_lun(&v, 129) == NULL); /* no such LUN */
	/* a stale node: same name, another device number */
	REQUIRE(unlink("/sys/.dev/sdx7") == 0);
	REQUIRE(mknod("/sys/.dev/sdx7", S_IFBLK | 0600, makedev(FAKE_MAJOR, 99)) == 0);
	CHECK(iscsi_view_lun(&v, 7) == NULL);
	iscsi_view_free(&v);
	/* device number -> target and LUN, through the parents */
	CHECK_INT(iscsi_devt_target(makedev(FAKE_MAJOR, 100), iqn, sizeof(iqn), &lun), 0);
	CHECK_STR(iqn, T1);
	CHECK_INT((int)lun, 100);
	CHECK_INT(iscsi_devt_target(makedev(FAKE_MAJOR, 210), iqn, sizeof(iqn), &lun), 0);
	CHECK_STR(iqn, T2);
	CHECK_INT(iscsi_devt_target(makedev(FAKE_MAJOR, 250), iqn, sizeof(iqn), &lun), 1);
}

TEST(view_lun)
{
	IN_CHILD(view_lun_body());
}

/* in_use for the decision: the LUNs listed in @arg (0-terminated) are mounted */
static int luns_in_use(const struct iscsi_disk *dk, void *arg, char *why, size_t len)
{
	for (const unsigned int *l = arg; *l; l++)
		if (dk->lun == *l) {
			snprintf(why, len, "/dev/%s (LUN %u) is mounted", dk->name, dk->lun);
			return 1;
		}
	return 0;
}

static void logout_decision_body(void)
{
	struct iscsi_view v;
	char why[512];
	unsigned int none[] = { 0 }, high[] = { 100, 0 }, last[] = { 128, 0 }, five[] = { 5, 0 };

	SETUP();
	REQUIRE_INT(iscsi_view_load(&v, T1), 0);
	CHECK_INT(iscsi_release_decide(&v, 3, luns_in_use, none, why, sizeof(why)), ISCSI_LOGOUT);
	/*
	 * LUN 100 (the 100th disk: past the old fixed list of 64) is mounted: releasing
	 * LUN 3 must keep the session and only delete LUN 3's disk
	 */
	CHECK_INT(iscsi_release_decide(&v, 3, luns_in_use, high, why, sizeof(why)),
		  ISCSI_DELETE_LUN);
	CHECK_CONTAINS(why, "LUN 100");
	CHECK_INT(iscsi_release_decide(&v, 128, luns_in_use, last, why, sizeof(why)), ISCSI_KEEP);
	CHECK_INT(iscsi_release_decide(&v, 1, luns_in_use, last, why, sizeof(why)),
		  ISCSI_DELETE_LUN);
	CHECK_INT(iscsi_release_decide(&v, -1, luns_in_use, last, why, sizeof(why)), ISCSI_KEEP);
	/* a LUN in use on the other (failed) session of the target counts too */
	CHECK_INT(iscsi_release_decide(&v, 5, luns_in_use, five, why, sizeof(why)), ISCSI_KEEP);
	iscsi_view_free(&v);
}

TEST(logout_decision_128_luns)
{
	IN_CHILD(logout_decision_body());
}

static void disk_in_use_body(void)
{
	struct iscsi_view v;
	const struct iscsi_disk *dk;
	char why[512];

	SETUP();
	REQUIRE_INT(iscsi_view_load(&v, T1), 0);
	dk = iscsi_view_lun(&v, 64);
	REQUIRE(dk != NULL);
	CHECK_INT(iscsi_disk_in_use(dk, why, sizeof(why)), 0);
	/* held by a device-mapper device */
	REQUIRE(fv_mkdir_p("/sys/devices/platform/host2/session1/target2:0:0/2:0:0:64/block/sdx64/"
			   "holders/dm-0",
			   0755) == 0);
	CHECK_INT(iscsi_disk_in_use(dk, why, sizeof(why)), 1);
	CHECK_CONTAINS(why, "held");
	/* and so the real decision keeps the session */
	CHECK_INT(iscsi_release_decide(&v, 2, in_use_real, NULL, why, sizeof(why)),
		  ISCSI_DELETE_LUN);
	iscsi_view_free(&v);
}

TEST(disk_in_use_holders)
{
	IN_CHILD(disk_in_use_body());
}

static void rescan_body(void)
{
	uint64_t bytes = 0;
	char buf[8] = "";
	int fd;

	SETUP();
	CHECK_INT(iscsi_disk_rescan(makedev(FAKE_MAJOR, 7), &bytes), 0);
	CHECK_U64(bytes, 7ULL << 20);
	fd = open("/sys/devices/platform/host2/session1/target2:0:0/2:0:0:7/rescan", O_RDONLY);
	REQUIRE(fd >= 0);
	CHECK_INT((int)read(fd, buf, sizeof(buf) - 1), 1);
	CHECK_STR(buf, "1");
	close(fd);
	CHECK_INT(iscsi_disk_rescan(makedev(FAKE_MAJOR, 250), &bytes), -ENODEV);
}

TEST(disk_rescan)
{
	IN_CHILD(rescan_body());
}
