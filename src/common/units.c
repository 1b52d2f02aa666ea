/*
 * units.c — the one grammar of numbers, sizes and durations that every
 * configuration key and every program's option reads (docs/CONFIG.md),
 * and sizes written for people.
 */
#include "common/units.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/err.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)

/* The one grammar of numbers in a configuration (docs/CONFIG.md): ASCII
 * decimal digits, optionally "." and 1..6 more; no sign, no exponent, no
 * surrounding space, and no leading zero before another digit, so that
 * "010" and "0x10" are refused rather than read as ten or sixteen or as
 * octal or hex, as strtod/strtoull would.  Parsed with integer arithmetic:
 * no float rounding, and overflow is seen.  0 (with *end past the number),
 * -1 if `s` does not start with such a number, -2 if the integer part
 * exceeds 64 bits. */
struct decimal {
	uint64_t ip;    /* integer part */
	uint64_t frac;  /* fraction = frac / scale */
	uint64_t scale; /* 10^(digits after the point); 1 without a point */
};

static int scan_decimal(const char *s, struct decimal *d, const char **end)
{
	const char *p = s;

	d->ip = 0;
	d->frac = 0;
	d->scale = 1;
	if (!isdigit((unsigned char)*p))
		return -1;
	if (p[0] == '0' && isdigit((unsigned char)p[1]))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned dig = (unsigned)(*p - '0');
		if (d->ip > (UINT64_MAX - dig) / 10)
			return -2;
		d->ip = d->ip * 10 + dig;
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -1;
		for (; isdigit((unsigned char)*p); p++) {
			if (d->scale == 1000000)
				return -1; /* more than 6 decimals: not a size anyone means */
			d->frac = d->frac * 10 + (uint64_t)(*p - '0');
			d->scale *= 10;
		}
	}
	*end = p;
	return 0;
}

/* Whether what follows a number could be meant as a unit: "0x10" and
 * "1e3" are numbers in a form the grammar refuses, not unknown units. */
static int all_letters(const char *s)
{
	for (; *s; s++)
		if (!isalpha((unsigned char)*s))
			return 0;
	return 1;
}

/* What every size error says is accepted; "%s" is what a bare number is. */
#define SIZE_FORMS                                                           \
	"expected a decimal number and an optional unit, e.g. 64GiB, 512MiB, "  \
	"1.5GB, 4096B (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB; K, M, G, T " \
	"= KiB..TiB; no sign, exponent, hex or leading zero; at most 6 "       \
	"decimals); a bare number is %s"

int kvt_parse_size(const char *s, uint64_t bare_unit, uint64_t *out)
{
	static const struct {
		const char *name;
		uint64_t mult;
	} units[] = {
		{ "B", 1 },         { "KiB", KiB },     { "MiB", MiB },
		{ "GiB", GiB },     { "TiB", TiB },     { "KB", 1000ull },
		{ "MB", 1000000ull }, { "GB", 1000000000ull },
		{ "TB", 1000000000000ull }, { "K", KiB }, { "M", MiB },
		{ "G", GiB },       { "T", TiB },
	};
	const char *bare = bare_unit == GiB ? "GiB" : bare_unit == 1 ? "bytes" : "units";
	const char *end;
	struct decimal d;
	uint64_t mult = bare_unit, whole, part;
	int rc;

	if (!s || !*s)
		return kvt_err(KVT_ECONFIG, "empty size: " SIZE_FORMS, bare);
	rc = scan_decimal(s, &d, &end);
	if (rc == -1)
		return kvt_err(KVT_ECONFIG, "\"%s\" is not a size: " SIZE_FORMS, s, bare);
	if (rc == -2)
		return kvt_err(KVT_ECONFIG, "\"%s\" is too large (at most 16 EiB)", s);
	while (*end == ' ')
		end++;
	if (*end) {
		size_t i;
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (!strcasecmp(end, units[i].name))
				break;
		if (i == sizeof(units) / sizeof(units[0]) && !all_letters(end))
			return kvt_err(KVT_ECONFIG, "\"%s\" is not a size: " SIZE_FORMS, s, bare);
		if (i == sizeof(units) / sizeof(units[0]))
			return kvt_err(KVT_ECONFIG,
				       "\"%s\" is not a size: unknown unit \"%s\"; " SIZE_FORMS,
				       s, end, bare);
		mult = units[i].mult;
	}
	if (d.frac && mult == 1)
		return kvt_err(KVT_ECONFIG,
			       "\"%s\" is not a whole number of bytes (a fraction needs a unit of KiB or KB and up)",
			       s);
	/* frac < scale <= 10^6 and mult <= 10^12: the product fits. */
	part = (d.frac * mult + d.scale / 2) / d.scale;
	if (d.ip > UINT64_MAX / mult || (whole = d.ip * mult) > UINT64_MAX - part)
		return kvt_err(KVT_ECONFIG, "\"%s\" is too large (at most 16 EiB)", s);
	*out = whole + part;
	return 0;
}

const char *kvt_fmt_size(uint64_t b, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 5) {
		v /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)b);
	else
		snprintf(buf, len, "%.*f %s", v < 10 ? 2 : 1, v, u[i]);
	return buf;
}

/* A whole number in lo..hi, in the grammar of scan_decimal without a
 * fraction.  The error names the value and the range; the caller's prefix
 * names the key. */
int kvt_parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	struct decimal d;
	const char *end;
	int rc = scan_decimal(v, &d, &end);

	if (rc == -1 || (!rc && (*end || d.scale != 1)))
		return kvt_err(KVT_ECONFIG,
			       "\"%s\" is not a whole number (expected decimal digits, %u..%u)",
			       v, lo, hi);
	if (rc == -2 || d.ip < lo || d.ip > hi)
		return kvt_err(KVT_ECONFIG, "%s is out of range %u..%u", v, lo, hi);
	*out = (uint32_t)d.ip;
	return 0;
}

/* A TTL longer than a century is not a TTL but a typo, and bounding it
 * keeps created_ns + ttl far from wrapping (docs/CONFIG.md). */
#define TTL_MAX_S (36500ull * 86400) /* 100 years of 365 days */
#define DURATION_FORMS "a whole number of seconds, or a decimal number and one of s, m, h, d, w: 3600, 90s, 1.5h, 7d; at most 36500d (100 years)"

/* A duration: "3600", "90s", "30m", "1.5h", "7d", "2w", in whole seconds,
 * 0..TTL_MAX_S; the number is scan_decimal's grammar. */
int kvt_parse_duration(const char *v, uint64_t *out)
{
	struct decimal d;
	const char *end;
	uint64_t mult;
	int rc = scan_decimal(v, &d, &end);

	if (rc == -1)
		return kvt_err(KVT_ECONFIG, "\"%s\" is not a duration: expected " DURATION_FORMS, v);
	if (rc == -2)
		return kvt_err(KVT_ECONFIG, "\"%s\" is too long: at most 36500d (100 years)", v);
	if (!strcmp(end, "") || !strcmp(end, "s"))
		mult = 1;
	else if (!strcmp(end, "m"))
		mult = 60;
	else if (!strcmp(end, "h"))
		mult = 3600;
	else if (!strcmp(end, "d"))
		mult = 86400;
	else if (!strcmp(end, "w"))
		mult = 7 * 86400;
	else if (!all_letters(end))
		return kvt_err(KVT_ECONFIG, "\"%s\" is not a duration: expected " DURATION_FORMS, v);
	else
		return kvt_err(KVT_ECONFIG, "\"%s\": unknown duration unit \"%s\" (expected " DURATION_FORMS ")",
			       v, end);
	/* frac < scale <= 10^6, mult <= 604800: no overflow. */
	if ((d.frac * mult) % d.scale)
		return kvt_err(KVT_ECONFIG, "\"%s\" is not a whole number of seconds", v);
	if (d.ip > TTL_MAX_S / mult ||
	    d.ip * mult + d.frac * mult / d.scale > TTL_MAX_S)
		return kvt_err(KVT_ECONFIG, "\"%s\" is too long: at most 36500d (100 years)", v);
	*out = d.ip * mult + d.frac * mult / d.scale;
	return 0;
}
