/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes out of mountutil.c: libmount's MNT_ERR_* never pass through (issue 9 item 8). */
#include <errno.h>
#include <fcntl.h>
#include <libmount.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"
#include "fv/mountutil.h"

/* our codes are outside errno (< 4096) and libmount's MNT_ERR_* (5000..5999) */
TEST(fv_err_range_is_ours)
{
	static const int ours[] = { FV_ERR_BADOPT, FV_ERR_TIMEOUT, FV_ERR_HELPER, FV_ERR_NOTBLANK,
				    FV_ERR_CONFLICT };

	for (size_t i = 0; i < ARRAY_SIZE(ours); i++) {
		CHECK(ours[i] > 4095);
		CHECK(ours[i] < 5000 || ours[i] > 5999);
	}
}

TEST(mnt_err_translated)
{
	static const int codes[] = { MNT_ERR_NOFSTAB, MNT_ERR_NOFSTYPE, MNT_ERR_NOSOURCE,
				     MNT_ERR_LOOPDEV, MNT_ERR_MOUNTOPT, MNT_ERR_APPLYFLAGS,
				     MNT_ERR_AMBIFS, MNT_ERR_LOCK, 5999 };

	for (size_t i = 0; i < ARRAY_SIZE(codes); i++) {
		int r = fv_mnt_errno(-codes[i]);

		CHECK(r < 0 && r > -4096);
	}
	CHECK_INT(fv_mnt_errno(-MNT_ERR_NOFSTYPE), -ENODEV);
	CHECK_INT(fv_mnt_errno(-EBUSY), -EBUSY);
	CHECK_INT(fv_mnt_errno(0), 0);
	CHECK_INT(fv_mnt_errno(5), 5);
}

/*
 * Through libmount itself: a tag no device has is MNT_ERR_NOSOURCE (5002)
 * inside, which was passed through and read as -FV_ERR_TIMEOUT (nfs.c then
 * took a mount that cannot work for one that ran out of time).
 */
TEST(mount_of_missing_source_is_an_errno)
{
	struct fv_ctx cx;
	char dir[PATH_MAX];
	int r;

	if (geteuid() != 0)
		SKIP("needs root (libmount refuses non-root mounts earlier)");
	snprintf(dir, sizeof(dir), "%s/fv-mnt-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	REQUIRE(mkdtemp(dir) != NULL);
	unit_ctx_reset(&cx);
	r = fv_mnt_mount(&cx, "UUID=00000000-dead-beef-0000-000000000000", dir, NULL, NULL, false);
	CHECK_INT(r, -ENOENT);
	CHECK(strstr(cx.message, "can't find UUID") != NULL);
	CHECK(cx.message[0] != '\0');
	rmdir(dir);
}

/*
 * The lean mountinfo reader against libmount on the same lines: every mount
 * of this process's table read both ways gives the same fields.
 */
TEST(mountinfo_lines_as_libmount_reads_them)
{
	struct libmnt_table *tb = mnt_new_table();
	struct libmnt_iter *it = mnt_new_iter(MNT_ITER_FORWARD);
	struct libmnt_fs *fs;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int n = 0;

	REQUIRE(tb && it && f);
	REQUIRE(mnt_table_parse_file(tb, "/proc/self/mountinfo") == 0);
	/* the table read twice: the same mounts unless one came or went in between */
	while (getline(&line, &cap, f) > 0 && mnt_table_next_fs(tb, it, &fs) == 0) {
		struct fv_mntline m;

		line[strcspn(line, "\n")] = '\0';
		REQUIRE(fv_mnt_parse_line(line, &m) == 0);
		if ((uint64_t)mnt_fs_get_id(fs) != m.id)
			break;
		CHECK(mnt_fs_get_devno(fs) == m.devno);
		CHECK_STR(mnt_fs_get_root(fs), m.root);
		CHECK_STR(mnt_fs_get_target(fs), m.target);
		CHECK_STR(mnt_fs_get_vfs_options(fs), m.vfs_options);
		CHECK_STR(mnt_fs_get_fstype(fs), m.fstype);
		CHECK_STR(mnt_fs_get_source(fs) ?: "", m.source);
		n++;
	}
	CHECK(n > 0);
	free(line);
	fclose(f);
	mnt_free_iter(it);
	mnt_unref_table(tb);
}

/*
 * A mount asked of the kernel by its ID (statmount(2)) against the same
 * mount read from the table: every mount point of this process's table,
 * opened and looked up both ways, gives the same fields.  On a kernel with
 * statmount's source string (6.13) the first way must have been taken.
 */
TEST(mount_by_id_as_the_table_has_it)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	unsigned hits = fv_mnt_statmount_hits;
	char *line = NULL;
	size_t cap = 0;
	struct utsname u;
	unsigned major = 0, minor = 0;
	int n = 0, roots = 0;

	REQUIRE(f);
	while (getline(&line, &cap, f) > 0) {
		struct fv_mntinfo a, b;
		struct fv_mntline m;
		int fd, ra, rb;

		line[strcspn(line, "\n")] = '\0';
		REQUIRE(fv_mnt_parse_line(line, &m) == 0);
		fd = open(m.target, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		fv_mnt_no_statmount = true;
		ra = fv_mnt_of_fd(fd, &a);
		fv_mnt_no_statmount = false;
		rb = fv_mnt_of_fd(fd, &b);
		close(fd);
		CHECK_INT(rb, ra);
		roots += ra == 0;
		if (ra != 0 || rb != 0)
			continue;
		CHECK_STR(b.source, a.source);
		CHECK_STR(b.fstype, a.fstype);
		CHECK_STR(b.root, a.root);
		CHECK_STR(b.vfs_options, a.vfs_options);
		CHECK(b.devno == a.devno);
		CHECK(b.readonly == a.readonly);
		n++;
	}
	free(line);
	fclose(f);
	/* qemu-user (the arm64 lane) reports no mount point as one (not even /): nothing to compare */
	if (roots == 0)
		SKIP("statx() reports no mount root here");
	CHECK(n > 0);
	REQUIRE(uname(&u) == 0);
	/* statmount asked of a kernel that has it (6.13 for the source), not of an emulator */
	if (sscanf(u.release, "%u.%u", &major, &minor) == 2 &&
	    (major > 6 || (major == 6 && minor >= 13)) &&
	    !(syscall(457, NULL, NULL, 0, 0) < 0 && errno == ENOSYS))
		CHECK(fv_mnt_statmount_hits > hits);
}

static void *first_read_of_a_thread(void *arg)
{
	int *reads = arg;

	*reads = fv_mnt_find("/", NULL) == 0 ? (int)fv_mnt_table_reads : -1;
	return NULL;
}

/* The table kept in a child in a mount namespace of its own: 0, or the number of the step that failed. */
static int kept_table_steps(void)
{
	char dir[] = "/tmp/fv-unit-tab.XXXXXX";
	unsigned r0 = fv_mnt_table_reads;
	struct fv_mntinfo mi;
	pthread_t t;
	int step = 0, thread_reads = -1, r;

	if (!mkdtemp(dir))
		return 100;
	/* three questions, one read */
	step++;
	if (fv_mnt_find("/", NULL) != 0 || fv_mnt_find("/", NULL) != 0 ||
	    fv_mnt_count_devno(makedev(0, 0)) < 0 || fv_mnt_table_reads - r0 != 1)
		goto out;
	/* a mount made since: seen, by reading the table again, once */
	step++;
	if (mount("fv-unit", dir, "tmpfs", 0, "size=64k") < 0)
		goto out;
	step++;
	if (fv_mnt_find(dir, &mi) != 0 || !streq(mi.fstype, "tmpfs") || mi.readonly ||
	    fv_mnt_find(dir, NULL) != 0 || fv_mnt_table_reads - r0 != 2)
		goto out;
	/* a change of a mount's flags is a change */
	step++;
	if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0 ||
	    fv_mnt_find(dir, &mi) != 0 || !mi.readonly || fv_mnt_table_reads - r0 != 3)
		goto out;
	/* and an umount */
	step++;
	if (umount(dir) < 0 || fv_mnt_find(dir, NULL) != 1 || fv_mnt_table_reads - r0 != 4)
		goto out;
	/* another thread reads its own */
	step++;
	r = pthread_create(&t, NULL, first_read_of_a_thread, &thread_reads);
	if (r != 0 || pthread_join(t, NULL) != 0 || thread_reads != 1)
		goto out;
	step = 0;
out:
	rmdir(dir);
	return step;
}

/*
 * The table read once and asked again until the kernel reports a change
 * (poll(2)'s POLLPRI on the open mountinfo file): a mount, a change of a
 * mount's flags, an umount each read it anew; nothing else does.
 */
TEST(mount_table_kept_until_it_changes)
{
	int status = 0;
	pid_t pid;

	if (geteuid() != 0)
		SKIP("needs root (a mount namespace of its own)");
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(99);
		_exit(kept_table_steps());
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	REQUIRE(WIFEXITED(status));
	if (WEXITSTATUS(status) == 99)
		SKIP("no mount namespace of its own here");
	/* the step of kept_table_steps() that failed, 0 when none */
	CHECK_INT(WEXITSTATUS(status), 0);
}

TEST(mountinfo_line_escapes_and_odd_fields)
{
	char l1[] = "36 35 98:0 /mnt\\0401 /mnt/a\\134b\\011c\\040(deleted) rw,noatime master:1 "
		    "shared:2 - ext3 /dev/root\\040x rw,errors=continue";
	char l2[] = "40 1 0:5 / /run/x ro,nosuid - tmpfs  rw";
	char l3[] = "41 1 0:5 / /run/y rw - tmpfs";
	char l4[] = "x 1 0:5 / /run/y rw - tmpfs none rw";
	struct fv_mntline m;

	REQUIRE(fv_mnt_parse_line(l1, &m) == 0);
	CHECK(m.id == 36);
	CHECK(m.devno == makedev(98, 0));
	CHECK_STR(m.root, "/mnt 1");
	CHECK_STR(m.target, "/mnt/a\\b\tc");
	CHECK_STR(m.vfs_options, "rw,noatime");
	CHECK_STR(m.fstype, "ext3");
	CHECK_STR(m.source, "/dev/root x");
	REQUIRE(fv_mnt_parse_line(l2, &m) == 0);
	CHECK_STR(m.source, ""); /* an empty source: two spaces */
	CHECK_STR(m.vfs_options, "ro,nosuid");
	CHECK_INT(fv_mnt_parse_line(l3, &m), -EINVAL);
	CHECK_INT(fv_mnt_parse_line(l4, &m), -EINVAL);
}
