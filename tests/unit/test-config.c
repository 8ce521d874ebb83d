/* SPDX-License-Identifier: Apache-2.0 */
/* fv_config_load(): defaults < config file < environment. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include "unit.h"
#include "fv/config.h"

#define DEFAULT_CONFIG "/etc/flexvol/flexvol.conf"

static const char *const envs[] = {
	"FLEXVOL_CONFIG",	  "FLEXVOL_LOOP_ROOT",	   "FLEXVOL_STATE_DIR",
	"FLEXVOL_RUN_DIR",	  "FLEXVOL_LOG_FILE",	   "FLEXVOL_NODE_NAME",
	"FLEXVOL_HELPER_PATH",	  "FLEXVOL_LOCK_TIMEOUT",  "FLEXVOL_HELPER_TIMEOUT",
	"FLEXVOL_MOUNT_TIMEOUT",  "FLEXVOL_DEVICE_TIMEOUT", "FLEXVOL_DEBUG",
	"FLEXVOL_GC_GRACE",	  "FLEXVOL_GC_INTERVAL",
	"FLEXVOL_CHAP_DIR",
};

static struct fv_config cfg;
static char err[1024];
static char conf[PATH_MAX];

static void clean_env(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(envs); i++)
		unsetenv(envs[i]);
}

/* Write @text to a fresh temp config file and point FLEXVOL_CONFIG at it. */
static bool use_config(const char *text)
{
	int fd;

	clean_env();
	snprintf(conf, sizeof(conf), "%s/fv-config-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	fd = mkstemp(conf);
	if (fd < 0)
		return false;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		close(fd);
		return false;
	}
	close(fd);
	setenv("FLEXVOL_CONFIG", conf, 1);
	return true;
}

static void done_config(void)
{
	unlink(conf);
	clean_env();
}

static int load(void)
{
	err[0] = '\0';
	memset(&cfg, 0x5a, sizeof(cfg));
	return fv_config_load(&cfg, "loop", err, sizeof(err));
}

static void check_defaults(void)
{
	struct utsname u;

	CHECK_STR(cfg.loop_root, "/var/lib/flexvol/loop");
	CHECK_STR(cfg.state_dir, "/var/lib/flexvol/state");
	CHECK_STR(cfg.run_dir, "/run/flexvol");
	CHECK_STR(cfg.log_file, "/var/log/flexvol/loop.log");
	CHECK_STR(cfg.helper_path, "/usr/sbin:/usr/bin:/sbin:/bin");
	if (uname(&u) == 0)
		CHECK_STR(cfg.node_name, u.nodename);
	CHECK_INT(cfg.lock_timeout, 150);
	CHECK_INT(cfg.helper_timeout, 120);
	CHECK_INT(cfg.mount_timeout, 60);
	CHECK_INT(cfg.device_timeout, 60);
}

TEST(defaults_from_empty_file)
{
	REQUIRE(use_config(""));
	CHECK_INT(load(), 0);
	CHECK_STR(err, "");
	check_defaults();
	done_config();
}

TEST(missing_default_file_is_fine)
{
	clean_env();
	if (access(DEFAULT_CONFIG, F_OK) == 0)
		SKIP(DEFAULT_CONFIG " exists on this machine");
	CHECK_INT(load(), 0);
	check_defaults();
	/* an empty FLEXVOL_CONFIG means the default file too */
	setenv("FLEXVOL_CONFIG", "", 1);
	CHECK_INT(load(), 0);
	check_defaults();
	clean_env();
}

TEST(missing_named_file_is_an_error)
{
	clean_env();
	setenv("FLEXVOL_CONFIG", "/nonexistent/flexvol.conf", 1);
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "/nonexistent/flexvol.conf");
	CHECK_CONTAINS(err, "No such file");
	clean_env();
}

TEST(file_values)
{
	REQUIRE(use_config("# node config\n"
			   "\n"
			   "loop_root = /srv/loop\n"
			   "  state_dir=/srv/state  \n"
			   "\trun_dir\t=\t/srv/run\r\n"
			   "log_file = /srv/log/loop.log\n"
			   "   # indented comment\n"
			   "node_name = node-a\n"
			   "helper_path = /opt/bin:/usr/bin\n"
			   "lock_timeout = 5\n"
			   "helper_timeout = 86400\n"
			   "mount_timeout = 1\n"
			   "device_timeout = 30")); /* no final newline */
	CHECK_INT(load(), 0);
	CHECK_STR(err, "");
	CHECK_STR(cfg.loop_root, "/srv/loop");
	CHECK_STR(cfg.state_dir, "/srv/state");
	CHECK_STR(cfg.run_dir, "/srv/run");
	CHECK_STR(cfg.log_file, "/srv/log/loop.log");
	CHECK_STR(cfg.node_name, "node-a");
	CHECK_STR(cfg.helper_path, "/opt/bin:/usr/bin");
	CHECK_INT(cfg.lock_timeout, 5);
	CHECK_INT(cfg.helper_timeout, 86400);
	CHECK_INT(cfg.mount_timeout, 1);
	CHECK_INT(cfg.device_timeout, 30);
	done_config();
}

TEST(chap_dir_key)
{
	REQUIRE(use_config(""));
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.chap_dir, "/etc/flexvol/chap");
	done_config();
	REQUIRE(use_config("chap_dir = /srv/chap\n"));
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.chap_dir, "/srv/chap");
	done_config();
	REQUIRE(use_config("chap_dir = srv/chap\n"));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "chap_dir must be an absolute path");
	done_config();
	REQUIRE(use_config("chap_dir = /srv/chap\n"));
	setenv("FLEXVOL_CHAP_DIR", "/run/chap", 1);
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.chap_dir, "/run/chap");
	done_config();
}

TEST(debug_key)
{
	static const char *const on[] = { "true", "yes", "on", "1", "all" };
	static const char *const off[] = { "false", "no", "off", "0" };
	char text[64];

	REQUIRE(use_config(""));
	CHECK_INT(load(), 0);
	CHECK(!cfg.debug);
	done_config();
	for (size_t i = 0; i < ARRAY_SIZE(on); i++) {
		snprintf(text, sizeof(text), "debug = %s\n", on[i]);
		REQUIRE(use_config(text));
		CHECK_INT(load(), 0);
		CHECK(cfg.debug);
		done_config();
	}
	for (size_t i = 0; i < ARRAY_SIZE(off); i++) {
		snprintf(text, sizeof(text), "debug = %s\n", off[i]);
		REQUIRE(use_config(text));
		CHECK_INT(load(), 0);
		CHECK(!cfg.debug);
		done_config();
	}
	REQUIRE(use_config("debug = maybe\n"));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "debug must be true or false: 'maybe'");
	done_config();
	REQUIRE(use_config("debug = true\n"));
	setenv("FLEXVOL_DEBUG", "0", 1); /* the environment wins, as for every key */
	CHECK_INT(load(), 0);
	CHECK(!cfg.debug);
	done_config();
}

/* fv_config_check_file(): the file alone; the environment neither hides nor adds a mistake. */
TEST(check_file_ignores_environment)
{
	REQUIRE(use_config("loop_rot = /srv\n"));
	setenv("FLEXVOL_LOOP_ROOT", "/env/loop", 1);
	err[0] = '\0';
	CHECK_INT(fv_config_check_file(&cfg, "loop", conf, err, sizeof(err)), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, ":1: unknown key 'loop_rot'");
	done_config();
	REQUIRE(use_config("lock_timeout = 9\n"));
	setenv("FLEXVOL_LOCK_TIMEOUT", "nonsense", 1);
	CHECK_INT(fv_config_check_file(&cfg, "loop", conf, err, sizeof(err)), 0);
	CHECK_INT(cfg.lock_timeout, 9);
	CHECK_STR(cfg.loop_root, "/var/lib/flexvol/loop");
	done_config();
	clean_env();
	CHECK_INT(fv_config_check_file(&cfg, "loop", "/nonexistent/x.conf", err, sizeof(err)), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "/nonexistent/x.conf");
}

TEST(environment_wins)
{
	REQUIRE(use_config("loop_root = /srv/loop\nlock_timeout = 5\nnode_name = from-file\n"));
	setenv("FLEXVOL_LOOP_ROOT", "/env/loop", 1);
	setenv("FLEXVOL_LOCK_TIMEOUT", "7", 1);
	setenv("FLEXVOL_STATE_DIR", "/env/state", 1);
	setenv("FLEXVOL_NODE_NAME", "", 1); /* empty: not set */
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.loop_root, "/env/loop");
	CHECK_INT(cfg.lock_timeout, 7);
	CHECK_STR(cfg.state_dir, "/env/state");
	CHECK_STR(cfg.node_name, "from-file");
	CHECK_STR(cfg.run_dir, "/run/flexvol"); /* untouched default */
	done_config();
}

/* Config @text must be refused with a message containing each of @want (NULL-terminated). */
static void refused(const char *text, int line, ...)
{
	const char *w;
	va_list ap;
	int r;

	if (!use_config(text)) {
		unit_fail(__FILE__, line, "cannot write the config");
		return;
	}
	r = load();
	if (r != -FV_ERR_BADOPT)
		unit_fail(__FILE__, line, "config '%s': got %d, want -FV_ERR_BADOPT", text, r);
	va_start(ap, line);
	while ((w = va_arg(ap, const char *)))
		if (!strstr(err, w))
			unit_fail(__FILE__, line, "config '%s': error '%s' lacks '%s'", text, err,
				  w);
	va_end(ap);
	done_config();
}

TEST(file_errors)
{
	char where[PATH_MAX + 16];

	/* the error names file:line */
	REQUIRE(use_config("loop_root = /srv/loop\n# fine\nbogus_key = 1\n"));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	snprintf(where, sizeof(where), "%s:3: unknown key 'bogus_key'", conf);
	CHECK_STR(err, where);
	done_config();

	refused("\n\nthis line has no equals sign\n", __LINE__, "expected 'key = value'", NULL);
	refused("loop_root = relative/path\n", __LINE__, "loop_root", "absolute", "relative/path",
		NULL);
	refused("state_dir = ./state\n", __LINE__, "state_dir", "absolute", NULL);
	refused("log_file = log\n", __LINE__, "log_file", NULL);
	refused("loop_root =\n", __LINE__, "loop_root", NULL);
	refused("node_name =\n", __LINE__, "node_name", NULL);
	refused("lock_timeout = 0\n", __LINE__, "lock_timeout", "'0'", NULL);
	refused("lock_timeout = 99999\n", __LINE__, "lock_timeout", "'99999'", NULL);
	refused("lock_timeout = 86401\n", __LINE__, "lock_timeout", NULL);
	refused("helper_timeout = abc\n", __LINE__, "helper_timeout", "'abc'", NULL);
	refused("mount_timeout = -1\n", __LINE__, "mount_timeout", NULL);
	refused("device_timeout = 1.5\n", __LINE__, "device_timeout", NULL);
	refused("device_timeout = 010\n", __LINE__, "device_timeout", NULL);
	refused("device_timeout = 4294967297\n", __LINE__, "device_timeout", NULL);
}

TEST(file_error_line_numbers)
{
	char where[PATH_MAX + 16];

	REQUIRE(use_config("# 1\n\nlock_timeout = 3\n# 4\nlock_timeout = abc\n"));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	snprintf(where, sizeof(where), "%s:5:", conf);
	CHECK_CONTAINS(err, where);
	done_config();
}

TEST(long_values)
{
	size_t n = PATH_MAX + 200;
	char *text = malloc(n);

	REQUIRE(text != NULL);
	/* a line longer than the reader's buffer */
	memset(text, 'a', n - 1);
	memcpy(text, "loop_root = /", 13);
	text[n - 1] = '\0';
	REQUIRE(use_config(text));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "line too long");
	done_config();

	/* a value that fits the line but not the field */
	char name[400];

	memset(name, 'n', sizeof(name));
	memcpy(name, "node_name = ", 12);
	name[sizeof(name) - 2] = '\n';
	name[sizeof(name) - 1] = '\0';
	REQUIRE(use_config(name));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "node_name");
	done_config();

	/* a directory of FV_CONFIG_PATH_MAX - 1 bytes is taken whole, one byte more refused */
	for (size_t len = FV_CONFIG_PATH_MAX - 1; len <= FV_CONFIG_PATH_MAX; len++) {
		memcpy(text, "state_dir = /", 13);
		memset(text + 13, 'd', len - 1);
		text[12 + len] = '\0';
		REQUIRE(use_config(text));
		if (len < FV_CONFIG_PATH_MAX) {
			CHECK_INT(load(), 0);
			CHECK_INT((int)strlen(cfg.state_dir), (int)len);
		} else {
			CHECK_INT(load(), -FV_ERR_BADOPT);
			CHECK_CONTAINS(err, "state_dir is empty or too long");
		}
		done_config();
	}
	free(text);
}

/* The whole file is read, however it grows the reader's buffer, up to 64 KiB and not a byte more. */
TEST(file_size_limit)
{
	static const char key[] = "lock_timeout = 7\n";
	size_t max = 64 * 1024, fill = max - (sizeof(key) - 1);
	char *text = malloc(max + 2);

	REQUIRE(text != NULL);
	/* comment lines up to the limit, the key in its last bytes */
	for (size_t i = 0; i < fill; i += 64) {
		size_t n = fill - i < 64 ? fill - i : 64;

		memset(text + i, '#', n);
		text[i + n - 1] = '\n';
	}
	memcpy(text + fill, key, sizeof(key));
	REQUIRE(strlen(text) == max);
	REQUIRE(use_config(text));
	CHECK_INT(load(), 0);
	CHECK_INT(cfg.lock_timeout, 7);
	done_config();

	/* one byte more */
	memcpy(text + fill, "#", 1);
	memcpy(text + fill + 1, key, sizeof(key));
	REQUIRE(use_config(text));
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "larger than 65536 bytes");
	done_config();
	free(text);
}

TEST(environment_errors)
{
	REQUIRE(use_config(""));
	setenv("FLEXVOL_STATE_DIR", "relative", 1);
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "FLEXVOL_STATE_DIR");
	CHECK_CONTAINS(err, "absolute");
	unsetenv("FLEXVOL_STATE_DIR");

	setenv("FLEXVOL_LOCK_TIMEOUT", "0", 1);
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "FLEXVOL_LOCK_TIMEOUT");
	setenv("FLEXVOL_LOCK_TIMEOUT", "99999", 1);
	CHECK_INT(load(), -FV_ERR_BADOPT);
	setenv("FLEXVOL_LOCK_TIMEOUT", "abc", 1);
	CHECK_INT(load(), -FV_ERR_BADOPT);
	setenv("FLEXVOL_LOCK_TIMEOUT", "2", 1);
	CHECK_INT(load(), 0);
	CHECK_INT(cfg.lock_timeout, 2);
	done_config();
}

TEST(attach_mode)
{
	REQUIRE(use_config(""));
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.attach_mode, "controller"); /* the default */
	done_config();
	REQUIRE(use_config("attach_mode = node\n"));
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.attach_mode, "node");
	setenv("FLEXVOL_ATTACH_MODE", "controller", 1);
	CHECK_INT(load(), 0);
	CHECK_STR(cfg.attach_mode, "controller");
	unsetenv("FLEXVOL_ATTACH_MODE");
	done_config();
	refused("attach_mode = Node\n", __LINE__, "attach_mode", "'Node'", NULL);
	refused("attach_mode =\n", __LINE__, "attach_mode", NULL);
	REQUIRE(use_config(""));
	setenv("FLEXVOL_ATTACH_MODE", "nodes", 1);
	CHECK_INT(load(), -FV_ERR_BADOPT);
	CHECK_CONTAINS(err, "FLEXVOL_ATTACH_MODE");
	unsetenv("FLEXVOL_ATTACH_MODE");
	done_config();
}

/* init's read: the attach mode alone, every other key checked as fv_config_load() checks it. */
TEST(attach_mode_alone)
{
	static const char *const texts[] = {
		"", "attach_mode = node\n", "attach_mode = controller\nlock_timeout = 5\n",
		"state_dir = /srv/state\nattach_mode = node\n", "attach_mode = node\nbogus = 1\n",
		"attach_mode = node\nloop_root = relative\n", "attach_mode = node\ndebug = maybe\n",
		"attach_mode = node\ngc_grace = 0\n", "attach_mode = nodes\n", "no equals sign\n",
	};
	char mode[FV_ATTACH_MODE_MAX], err2[sizeof(err)];

	for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
		REQUIRE(use_config(texts[i]));
		memset(mode, 0x5a, sizeof(mode));
		err2[0] = '\0';
		CHECK_INT(fv_config_attach_mode(mode, err2, sizeof(err2)), load());
		CHECK_STR(err2, err);
		if (err[0] == '\0')
			CHECK_STR(mode, cfg.attach_mode);
		setenv("FLEXVOL_LOCK_TIMEOUT", "0", 1); /* the environment is checked too */
		CHECK_INT(fv_config_attach_mode(mode, err2, sizeof(err2)), -FV_ERR_BADOPT);
		CHECK_INT(load(), -FV_ERR_BADOPT);
		CHECK_STR(err2, err);
		unsetenv("FLEXVOL_LOCK_TIMEOUT");
		setenv("FLEXVOL_ATTACH_MODE", "controller", 1);
		if (load() == 0) {
			CHECK_INT(fv_config_attach_mode(mode, err2, sizeof(err2)), 0);
			CHECK_STR(mode, "controller");
		}
		unsetenv("FLEXVOL_ATTACH_MODE");
		done_config();
	}
}

/* The collector's keys (docs/design.md, "Garbage collection"): 0 is a value there ("none"). */
TEST(gc_keys)
{
	REQUIRE(use_config(""));
	CHECK_INT(load(), 0);
	CHECK_INT(cfg.gc_grace, 600);
	CHECK_INT(cfg.gc_interval, 60);
	done_config();
	REQUIRE(use_config("gc_grace = 0\ngc_interval = 0\n"));
	CHECK_INT(load(), 0);
	CHECK_INT(cfg.gc_grace, 0);
	CHECK_INT(cfg.gc_interval, 0);
	setenv("FLEXVOL_GC_GRACE", "30", 1);
	CHECK_INT(load(), 0);
	CHECK_INT(cfg.gc_grace, 30);
	unsetenv("FLEXVOL_GC_GRACE");
	done_config();
	refused("gc_grace = -1\n", __LINE__, "gc_grace", "'-1'", NULL);
	refused("gc_interval = 604801\n", __LINE__, "gc_interval", NULL);
	refused("gc_grace = 10m\n", __LINE__, "gc_grace", NULL);
}

/* A config that is not a regular file is an error, not an empty config; a FIFO does not block (issue 9 item 8). */
TEST(config_not_a_regular_file)
{
	char dir[PATH_MAX], fifo[PATH_MAX + 16];

	clean_env();
	snprintf(dir, sizeof(dir), "%s/fv-config-dir-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	REQUIRE(mkdtemp(dir) != NULL);
	setenv("FLEXVOL_CONFIG", dir, 1);
	CHECK(load() < 0);
	CHECK(strstr(err, "not a regular file") != NULL);
	CHECK(strstr(err, dir) != NULL);

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	REQUIRE(mkfifo(fifo, 0600) == 0);
	setenv("FLEXVOL_CONFIG", fifo, 1);
	alarm(10); /* a blocking open would hang here: SIGALRM ends the test binary as failed */
	CHECK(load() < 0);
	alarm(0);
	CHECK(strstr(err, "not a regular file") != NULL);

	/* /dev/null (what the tests use) stays an empty config */
	setenv("FLEXVOL_CONFIG", "/dev/null", 1);
	CHECK_INT(load(), 0);
	unlink(fifo);
	rmdir(dir);
	clean_env();
}
