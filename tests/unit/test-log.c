/* SPDX-License-Identifier: Apache-2.0 */
/* The log file: its directory made on first use, UTC stamps without the time zone file. */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "unit.h"
#include "fv/log.h"
#include "fv/version.h"

static char dir[PATH_MAX];

/* One line logged to a fresh file under a directory that does not exist yet. */
static bool log_one(char *line, size_t len, time_t *t0, time_t *t1)
{
	char path[PATH_MAX + 32];
	FILE *f;
	bool ok;

	snprintf(dir, sizeof(dir), "%s/fv-log-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	if (!mkdtemp(dir))
		return false;
	snprintf(path, sizeof(path), "%s/sub/dir/unit.log", dir);
	*t0 = time(NULL);
	fv_log_open("unit", path);
	fv_log("hello %d", 42);
	fv_log_close();
	*t1 = time(NULL);
	f = fopen(path, "re");
	if (!f)
		return false;
	ok = fgets(line, (int)len, f) != NULL;
	fclose(f);
	return ok;
}

TEST(log_dir_made_on_first_use_and_utc_stamp)
{
	char line[256], want0[64], want1[64], cmd[PATH_MAX + 16];
	struct tm tm;
	time_t t0, t1;

	REQUIRE(log_one(line, sizeof(line), &t0, &t1));
	/* 2026-12-03T04:20:19.828Z flexvol-unit[123] 0.1.0+g0123456789ab: hello 42 */
	gmtime_r(&t0, &tm);
	strftime(want0, sizeof(want0), "%Y-%m-%dT%H:%M:%S.", &tm);
	gmtime_r(&t1, &tm);
	strftime(want1, sizeof(want1), "%Y-%m-%dT%H:%M:%S.", &tm);
	CHECK(!strncmp(line, want0, strlen(want0)) || !strncmp(line, want1, strlen(want1)));
	CHECK(strstr(line, "Z flexvol-unit[") == line + 23);
	snprintf(cmd, sizeof(cmd), "] %s: hello 42\n", fv_version); /* the build's version, every line */
	CHECK(strstr(line, cmd) != NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_INT(system(cmd), 0);
}

