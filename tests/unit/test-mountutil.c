/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes out of mountutil.c: libmount's MNT_ERR_* never pass through (issue 9 item 8). */
#include <libmount.h>

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
