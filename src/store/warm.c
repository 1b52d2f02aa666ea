/*
 * warm.c — warm starts: the hot list a node writes, and the first tier
 * filled from it when the node comes back (kvt_store_hot_save,
 * kvt_store_warm; docs/DAEMON_OPS.md, "Warm starts").
 *
 * A restarted node whose disk and shared tiers still hold its chunks has
 * an empty DRAM tier: every hit is a disk read until traffic has pulled
 * the working set up again, and a fleet restarting at once reads the
 * shared tiers all together.  The node remembers what its first tier held,
 * most recently used first (the policy's own clock, hier_hot), and on the
 * way back copies those chunks up — within a byte budget and a bandwidth —
 * before it says it is ready.
 *
 * The hot list (version 1), little-endian:
 *
 *     0   8  magic "KVTHOT01"
 *     8   8  u64 count
 *    16  32 x count  keys, the most recently used first
 *     .   8  u64 XXH3-64 of everything before it
 *
 * kvt_hot_parse reads it from memory and refuses anything else, naming
 * what is wrong; fuzz/fuzz_hot.c drives it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/err.h"
#include "store/store_int.h"
#include "store/warm.h"

#define HOT_MAGIC "KVTHOT01"
#define HOT_HEAD 16
#define HOT_MAX_KEYS (1ull << 26) /* 2 GiB of keys: far past any first tier */

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int kvt_hot_parse(const void *buf, size_t len, kvt_key **keys, size_t *n)
{
	const uint8_t *b = buf;
	uint64_t count;

	*keys = NULL;
	*n = 0;
	if (len < HOT_HEAD + 8)
		return kvt_err(KVT_EMALFORMED, "hot list: %zu bytes, shorter than its header", len);
	if (memcmp(b, HOT_MAGIC, 8))
		return kvt_err(KVT_EMALFORMED, "hot list: no KVTHOT01 magic at its start");
	count = get64(b + 8);
	if (count > HOT_MAX_KEYS || len != HOT_HEAD + count * KVT_KEY_BYTES + 8)
		return kvt_err(KVT_EMALFORMED, "hot list: %zu bytes for %llu keys (%llu expected)",
			       len, (unsigned long long)count,
			       count > HOT_MAX_KEYS ? 0ull
						    : (unsigned long long)(HOT_HEAD + count * 32 + 8));
	if (XXH3_64bits(b, len - 8) != get64(b + len - 8))
		return kvt_err(KVT_EMALFORMED, "hot list: checksum mismatch (a damaged file)");
	if (count && !(*keys = malloc(count * sizeof(**keys))))
		return kvt_err(KVT_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < count; i++)
		memcpy((*keys)[i].b, b + HOT_HEAD + i * KVT_KEY_BYTES, KVT_KEY_BYTES);
	*n = (size_t)count;
	return 0;
}

int kvt_store_hot_save(kvt_store *st, const char *path, size_t max_keys)
{
	char tmp[4096];
	kvt_key *keys;
	uint8_t *img;
	size_t n, len;
	int fd, rc = 0;

	kvt_err_clear();
	if (!st || !path)
		return kvt_err(KVT_EINVAL, "store or path missing");
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return kvt_err(KVT_EINVAL, "hot list path too long");
	if ((rc = hier_hot(st->hier, 0, &keys, &n)))
		return rc;
	if (max_keys && n > max_keys)
		n = max_keys;
	len = HOT_HEAD + n * KVT_KEY_BYTES + 8;
	if (!(img = malloc(len))) {
		free(keys);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	memcpy(img, HOT_MAGIC, 8);
	put64(img + 8, n);
	for (size_t i = 0; i < n; i++)
		memcpy(img + HOT_HEAD + i * KVT_KEY_BYTES, keys[i].b, KVT_KEY_BYTES);
	put64(img + len - 8, XXH3_64bits(img, len - 8));
	free(keys);

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = kvt_err(-errno, "hot list: create %s: %s", tmp, strerror(errno));
	} else {
		size_t off = 0;
		while (off < len && rc == 0) {
			ssize_t w = write(fd, img + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				rc = kvt_err(w < 0 ? -errno : -EIO, "hot list: write %s: %s", tmp,
					     w < 0 ? strerror(errno) : "no progress");
			else
				off += (size_t)w;
		}
		if (rc == 0 && fsync(fd))
			rc = kvt_err(-errno, "hot list: fsync %s: %s", tmp, strerror(errno));
		close(fd);
		if (rc == 0 && rename(tmp, path))
			rc = kvt_err(-errno, "hot list: rename to %s: %s", path, strerror(errno));
		if (rc)
			unlink(tmp);
	}
	free(img);
	return rc;
}

static int read_all(const char *path, uint8_t **buf, size_t *len)
{
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t off = 0;

	*buf = NULL;
	if (fd < 0)
		return errno == ENOENT ? kvt_err(KVT_ENOTFOUND, "no hot list at %s", path)
				       : kvt_err(-errno, "hot list %s: %s", path, strerror(errno));
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return kvt_err(KVT_EMALFORMED, "hot list %s: not a regular file", path);
	}
	if ((uint64_t)sb.st_size > HOT_HEAD + HOT_MAX_KEYS * KVT_KEY_BYTES + 8) {
		close(fd);
		return kvt_err(KVT_EMALFORMED, "hot list %s: %lld bytes, past any list", path,
			       (long long)sb.st_size);
	}
	*len = (size_t)sb.st_size;
	if (!(*buf = malloc(*len ? *len : 1))) {
		close(fd);
		return kvt_err(KVT_ENOMEM, "out of memory");
	}
	while (off < *len) {
		ssize_t r = read(fd, *buf + off, *len - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		off += (size_t)r;
	}
	close(fd);
	*len = off; /* a file cut short meanwhile fails the parse */
	return 0;
}

static void progress_set(uint64_t *field, uint64_t v)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
}

/* Copy `key` from the highest lower tier holding it into the first: its
 * image bytes, 0 if no tier holds it, or a negative code. */
static int64_t warm_one(kvt_store *st, const kvt_key *key)
{
	for (int src = 1; src < st->n_tiers; src++) {
		kvt_tier *t = st->tiers[src];
		kvt_tier_rbuf *rb;
		kvt_obj_hdr h;
		int rc;

		if (t->ops->exists(t, key) != 1)
			continue;
		if (t->ops->get_into) {
			kvt_tier *t0 = st->tiers[0];
			int64_t got;
			rc = store_promote_into(st, NULL, key, src);
			if (rc && rc != KVT_EEXIST)
				return rc;
			if (t0->ops->get(t0, key, &rb)) /* evicted again at once: counted as none */
				return 0;
			got = (int64_t)rb->len;
			t0->ops->release(t0, rb);
			return got;
		}
		if ((rc = t->ops->get(t, key, &rb)))
			return rc == KVT_ENOTFOUND ? 0 : rc;
		rc = store_image_header(rb, &h);
		if (rc == 0)
			rc = store_copy_verified(st, 0, rb, &h);
		t->ops->release(t, rb);
		if (rc == 0 || rc == KVT_EEXIST)
			return (int64_t)KVT_OBJ_HEADER_BYTES + (int64_t)h.payload_len;
		return rc;
	}
	return 0;
}

int kvt_store_warm(kvt_store *st, const char *path, uint64_t budget, uint64_t bps,
		   kvt_warm_progress *p)
{
	kvt_warm_progress local;
	struct timespec t0;
	kvt_tier_stats ts;
	uint8_t *buf;
	kvt_key *keys;
	size_t len = 0, n;
	uint64_t bytes = 0;
	int rc;

	kvt_err_clear();
	if (!p)
		p = &local;
	{ /* all but a cancel already asked for */
		uint32_t cancel = __atomic_load_n(&p->cancel, __ATOMIC_RELAXED);
		memset(p, 0, sizeof(*p));
		p->cancel = cancel;
	}
	if (!st || !path) {
		p->finished = 1;
		return kvt_err(KVT_EINVAL, "store or path missing");
	}
	if ((rc = read_all(path, &buf, &len)) || (rc = kvt_hot_parse(buf, len, &keys, &n))) {
		free(buf);
		__atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
		return rc;
	}
	free(buf);
	memset(&ts, 0, sizeof(ts));
	st->tiers[0]->ops->stats(st->tiers[0], &ts);
	if (!budget || budget > ts.capacity_bytes / 10 * 9)
		budget = ts.capacity_bytes / 10 * 9; /* more would evict what it just loaded */
	progress_set(&p->budget_bytes, budget);
	progress_set(&p->listed, n);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t i = 0; i < n && bytes < budget &&
			   !__atomic_load_n(&p->cancel, __ATOMIC_RELAXED); i++) {
		int64_t got;

		if (st->tiers[0]->ops->exists(st->tiers[0], &keys[i]) == 1) {
			progress_set(&p->already, p->already + 1);
		} else if ((got = warm_one(st, &keys[i])) > 0) {
			bytes += (uint64_t)got;
			progress_set(&p->loaded, p->loaded + 1);
			progress_set(&p->loaded_bytes, bytes);
		} else if (got == 0) {
			progress_set(&p->missing, p->missing + 1);
		} else {
			progress_set(&p->failed, p->failed + 1);
		}
		progress_set(&p->done, i + 1);
		if (bps) { /* no faster than bytes_per_s, on average since the start */
			struct timespec now;
			double ahead;
			clock_gettime(CLOCK_MONOTONIC, &now);
			ahead = (double)bytes / (double)bps - ((double)(now.tv_sec - t0.tv_sec) +
							       (now.tv_nsec - t0.tv_nsec) / 1e9);
			if (ahead > 0) {
				struct timespec d = { (time_t)ahead,
						      (long)((ahead - (double)(time_t)ahead) * 1e9) };
				while (nanosleep(&d, &d) && errno == EINTR)
					;
			}
		}
	}
	free(keys);
	__atomic_store_n(&p->finished, 1, __ATOMIC_RELEASE);
	return 0;
}
