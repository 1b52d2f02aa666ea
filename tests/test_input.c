/*
 * test_input.c — the command line's strict parsers of numbers and its
 * bounded token-file reader (src/cli/common.c).
 *
 * The CLI is not a library, so its one shared file is compiled into this
 * test directly; it depends only on libkvtier.
 */
#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "cli/common.c"
#include "test.h"

/* The helpers print why they refuse; that is for users, not this log. */
static void quiet(int on)
{
	static int saved = -1;
	fflush(stderr);
	if (on) {
		int devnull = open("/dev/null", O_WRONLY);
		saved = dup(2);
		if (devnull >= 0) {
			dup2(devnull, 2);
			close(devnull);
		}
	} else if (saved >= 0) {
		dup2(saved, 2);
		close(saved);
		saved = -1;
	}
}

static void integers(void)
{
	static const char *const no[] = {
		"", "-1", "+1", " 1", "1 ", "1abc", "abc", "0x10", "010", "1e3", "1.0",
		"18446744073709551616", "99999999999999999999999",
	};
	uint64_t v = 77;
	uint32_t w = 77;

	CHECK_EQ(cli_parse_u64("t", "--n", "0", 0, 10, &v), 0);
	CHECK(v == 0);
	CHECK_EQ(cli_parse_u64("t", "--n", "18446744073709551615", 0, UINT64_MAX, &v), 0);
	CHECK(v == UINT64_MAX);
	CHECK_EQ(cli_parse_u32("t", "--n", "1048576", 1, 1u << 20, &w), 0);
	CHECK_EQ(w, 1u << 20);
	quiet(1);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		v = 77;
		CHECK_EQ(cli_parse_u64("t", "--n", no[i], 0, UINT64_MAX, &v), -1);
		CHECK(v == 77);
	}
	/* "-1" was 4294967295 repeats for `plan --repeat` via atoi's cast. */
	CHECK_EQ(cli_parse_u32("t", "--repeat", "4294967295", 1, 1000, &w), -1);
	CHECK_EQ(cli_parse_u32("t", "--n", "0", 1, 10, &w), -1);
	CHECK_EQ(cli_parse_u32("t", "--n", "11", 1, 10, &w), -1);
	quiet(0);
}

static void reals(void)
{
	static const char *const no[] = {
		"", "abc", "nan", "NaN", "inf", "-inf", "infinity", "1e400", "-0.5", "+0.5",
		" 1", "1 ", "0x1p3", ".5", "1.", "1e", "1e+", "5,5", "2.5x",
	};
	double d = 7;

	CHECK_EQ(cli_parse_double("t", "--x", "0.25", 0, 1, &d), 0);
	CHECK(d == 0.25);
	CHECK_EQ(cli_parse_double("t", "--x", "1e-3", 0, 1, &d), 0);
	CHECK(fabs(d - 1e-3) < 1e-15);
	CHECK_EQ(cli_parse_double("t", "--x", "800", 0, 1e9, &d), 0);
	CHECK_EQ(cli_parse_double("t", "--x", "2.5E+2", 0, 1e9, &d), 0);
	CHECK(d == 250);
	quiet(1);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		d = 7;
		CHECK_EQ(cli_parse_double("t", "--x", no[i], 0, 1e300, &d), -1);
		CHECK(d == 7);
	}
	CHECK_EQ(cli_parse_double("t", "--target-hit", "1.5", 0, 1, &d), -1);
	quiet(0);
}

static void sizes_and_durations(void)
{
	uint64_t v = 0;

	CHECK_EQ(cli_parse_size("t", "--b", "64KiB", 1, 1ull << 30, &v), 0);
	CHECK(v == 65536);
	CHECK_EQ(cli_parse_size("t", "--b", "4096", 1, 1ull << 30, &v), 0);
	CHECK(v == 4096);
	CHECK_EQ(cli_parse_duration("t", "--ttl", "7d", &v), 0);
	CHECK(v == 604800);
	quiet(1);
	CHECK_EQ(cli_parse_size("t", "--b", "0.5", 1, 1ull << 30, &v), -1); /* half a byte */
	CHECK_EQ(cli_parse_size("t", "--b", "2GiB", 1, 1ull << 30, &v), -1);
	CHECK_EQ(cli_parse_size("t", "--b", "0", 1, 1ull << 30, &v), -1);
	CHECK_EQ(cli_parse_size("t", "--b", "0x10", 1, 1ull << 30, &v), -1);
	CHECK_EQ(cli_parse_duration("t", "--ttl", "213503982334601d", &v), -1);
	CHECK_EQ(cli_parse_duration("t", "--ttl", "1e300d", &v), -1);
	CHECK_EQ(cli_parse_duration("t", "--ttl", "-1", &v), -1);
	quiet(0);
}

/* A token file whose contents are `text` (len bytes); its path in `path`. */
static int token_file(char *path, const void *text, size_t len)
{
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (write(fd, text, len) != (ssize_t)len) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static void tokens(void)
{
	char path[] = "/tmp/kvt-tokens-XXXXXX";
	uint32_t *t = NULL;
	size_t n = 0;

	if (token_file(path, "[1, 2,\n 4294967295]", 19) == 0) {
		CHECK_EQ(cli_read_tokens(path, &t, &n), 0);
		CHECK_EQ(n, 3);
		CHECK(t && t[2] == UINT32_MAX);
		free(t);
		unlink(path);
	}
	quiet(1);
	/* /dev/zero: refused at its first byte, not read until memory ends. */
	CHECK_EQ(cli_read_tokens("/dev/zero", &t, &n), -1);
	CHECK_EQ(cli_read_tokens("/tmp", &t, &n), -1);
	static const char *const no[] = { "1 2 4294967296", "[1, 2", "[1] 2", "1 -2", "1.5" };
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		char p2[] = "/tmp/kvt-tokens-XXXXXX";
		if (token_file(p2, no[i], strlen(no[i])))
			continue;
		CHECK_EQ(cli_read_tokens(p2, &t, &n), -1);
		unlink(p2);
	}
	quiet(0);

	/* The bound: one byte past CLI_TOKENS_MAX_BYTES (spaces, so nothing
	 * is kept) is refused; exactly the bound is read. */
	size_t len = CLI_TOKENS_MAX_BYTES;
	char *big = malloc(len + 1);
	if (big) {
		memset(big, ' ', len + 1);
		big[0] = '7';
		char p3[] = "/tmp/kvt-tokens-XXXXXX";
		if (token_file(p3, big, len) == 0) {
			CHECK_EQ(cli_read_tokens(p3, &t, &n), 0);
			CHECK_EQ(n, 1);
			free(t);
			int fd = open(p3, O_WRONLY | O_APPEND);
			CHECK(fd >= 0 && write(fd, " ", 1) == 1);
			if (fd >= 0)
				close(fd);
			quiet(1);
			CHECK_EQ(cli_read_tokens(p3, &t, &n), -1);
			quiet(0);
			unlink(p3);
		}
		free(big);
	}
}

static void bounded_file(void)
{
	char path[] = "/tmp/kvt-file-XXXXXX";
	uint8_t *b = NULL;
	size_t len = 0;

	if (token_file(path, "0123456789", 10))
		return;
	CHECK_EQ(cli_read_file_max(path, 10, &b, &len), 0);
	CHECK_EQ(len, 10);
	free(b);
	quiet(1);
	CHECK_EQ(cli_read_file_max(path, 9, &b, &len), -1);
	CHECK_EQ(cli_read_file_max("/dev/zero", 1 << 20, &b, &len), -1);
	CHECK_EQ(cli_read_file_max("/tmp", 1 << 20, &b, &len), -1);
	quiet(0);
	unlink(path);
}

int main(void)
{
	integers();
	reals();
	sizes_and_durations();
	tokens();
	bounded_file();
	TEST_DONE();
}
