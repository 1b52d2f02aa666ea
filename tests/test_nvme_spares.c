/*
 * test_nvme_spares.c — the NVMe tier's spare files (src/tier/nvme.c,
 * "Spares"): a deleted version's file is kept under a temporary name and a
 * later put writes its image into it, so a crash-safe SET neither makes nor
 * frees a file.  Checked here: images of other sizes both ways (an exactly
 * block-sized one too) read back byte-identical, power-safe puts into a
 * spare, a read in flight across a delete and a reuse, a full tier with no
 * eviction, spares given back after a failed put, close removing them,
 * and six threads mixing puts, gets and deletes — with io_uring and with
 * pread/pwrite.
 */
#include "nvme_test_util.h"
/* --- tests ------------------------------------------------------------------ */

static kvt_ns ns_odd;

static ino_t ino_of(const char *p)
{
	struct stat st;
	return stat(p, &st) ? 0 : st.st_ino;
}

static void settle_wait(void) { usleep(200000); }

/* Recycling across sizes: large -> small (aligned, cut), small -> large (extended), odd. */
static void test_sizes(int uring)
{
	char *dir = new_dir();
	uint64_t sl = img_len(&ns_small), ll = img_len(&ns_large), ol = img_len(&ns_odd);
	uint8_t *s = malloc(sl), *l = malloc(ll), *o = malloc(ol);
	kvt_key ka = key_of(1), kb = key_of(2), kc = key_of(3), kd = key_of(4);
	kvt_tier *t = open_tier(dir, 1ull << 30, uring, NULL);
	ino_t ia, ib, ic;

	fprintf(stderr, "  sizes uring=%d: small %llu (aligned %d) large %llu odd %llu\n", uring,
		(unsigned long long)sl, !(sl & 4095), (unsigned long long)ll, (unsigned long long)ol);
	CHECK_EQ(put_one(t, &ns_large, &ka, 11, KVT_DUR_CRASH_SAFE, l), 0);
	ia = ino_of(final_path(dir, &ka));
	CHECK_EQ(t->ops->del(t, &ka), 0);
	CHECK_EQ(t->ops->exists(t, &ka), 0);
	CHECK_EQ(file_size(final_path(dir, &ka)), -1);
	CHECK_EQ(count_dir(dir, "tmp"), 1); /* the spare */
	settle_wait();
	CHECK_EQ(put_one(t, &ns_small, &kb, 12, KVT_DUR_CRASH_SAFE, s), 0);
	ib = ino_of(final_path(dir, &kb));
	CHECK_EQ(ib, ia); /* the large file, cut */
	CHECK_EQ(file_size(final_path(dir, &kb)), (long long)sl);
	CHECK_EQ(get_cmp(t, &kb, s, sl), 0);
	CHECK_EQ(count_dir(dir, "tmp"), 0);
	CHECK_EQ(t->ops->del(t, &kb), 0);
	settle_wait();
	CHECK_EQ(put_one(t, &ns_large, &kc, 13, KVT_DUR_POWER_SAFE, l), 0);
	ic = ino_of(final_path(dir, &kc));
	CHECK_EQ(ic, ia); /* the small one, extended */
	CHECK_EQ(file_size(final_path(dir, &kc)), (long long)ll);
	CHECK_EQ(get_cmp(t, &kc, l, ll), 0);
	CHECK_EQ(t->ops->del(t, &kc), 0);
	settle_wait();
	CHECK_EQ(put_one(t, &ns_odd, &kd, 14, KVT_DUR_CACHED, o), 0);
	CHECK_EQ(ino_of(final_path(dir, &kd)), ia);
	CHECK_EQ(file_size(final_path(dir, &kd)), (long long)ol);
	CHECK_EQ(get_cmp(t, &kd, o, ol), 0);
	{
		kvt_tier_stats st;
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 1);
		CHECK_EQ(st.used_bytes, (ol + 4095) & ~4095ull);
	}
	/* a spare left at close is removed */
	CHECK_EQ(t->ops->del(t, &kd), 0);
	CHECK_EQ(count_dir(dir, "tmp"), 1);
	t->ops->close(t);
	CHECK_EQ(count_dir(dir, "tmp"), 0);
	t = open_tier(dir, 1ull << 30, uring, NULL);
	{
		kvt_tier_stats st;
		t->ops->stats(t, &st);
		CHECK_EQ(st.chunks, 0);
	}
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir); free(s); free(l); free(o);
}

/* A read in flight when its file is deleted keeps its bytes: no put
 * overwrites a spare while a read that may hold it runs. */
struct rd_arg { kvt_tier *t; const char *dir; kvt_key victim, other; uint8_t *buf; size_t cap;
		ino_t victim_ino, other_ino; int put_rc; uint8_t *otherimg; };

static int rd_reserve(void *arg, uint64_t len, const struct iovec **iov, int *n)
{
	struct rd_arg *a = arg;
	static struct iovec v;
	/* the read has its file open: delete it, then put another key */
	CHECK_EQ(a->t->ops->del(a->t, &a->victim), 0);
	settle_wait();
	a->put_rc = put_one(a->t, &ns_large, &a->other, 99, KVT_DUR_CRASH_SAFE, a->otherimg);
	a->other_ino = ino_of(final_path(a->dir, &a->other));
	v.iov_base = a->buf;
	v.iov_len = len;
	*iov = &v;
	*n = 1;
	return 0;
}

static void test_reader(int uring)
{
	char *dir = new_dir();
	uint64_t ll = img_len(&ns_large);
	uint8_t *l = malloc(ll), *l2 = malloc(ll);
	struct rd_arg a = { 0 };
	kvt_tier *t = open_tier(dir, 1ull << 30, uring, NULL);
	void *buf = NULL;

	CHECK_EQ(posix_memalign(&buf, 4096, ll + 4096), 0);
	a.t = t; a.dir = dir; a.victim = key_of(20); a.other = key_of(21); a.buf = buf;
	a.otherimg = l2;
	CHECK_EQ(put_one(t, &ns_large, &a.victim, 20, KVT_DUR_CRASH_SAFE, l), 0);
	a.victim_ino = ino_of(final_path(dir, &a.victim));
	CHECK_EQ(t->ops->get_into(t, &a.victim, rd_reserve, &a), 0);
	CHECK_EQ(a.put_rc, 0);
	CHECK(a.other_ino != a.victim_ino); /* a fresh file, not the spare */
	CHECK_EQ(memcmp(buf, l, ll), 0);   /* the read's bytes are whole */
	CHECK_EQ(get_cmp(t, &a.other, l2, ll), 0);
	/* the read over, the next put takes the spare */
	{
		kvt_key k = key_of(22);
		CHECK_EQ(put_one(t, &ns_large, &k, 22, KVT_DUR_CRASH_SAFE, l), 0);
		CHECK_EQ(ino_of(final_path(dir, &k)), a.victim_ino);
		CHECK_EQ(get_cmp(t, &k, l, ll), 0);
	}
	t->ops->close(t);
	CHECK_EQ(count_dir(dir, "tmp"), 0);
	tt_rm_rf(dir);
	free(dir); free(l); free(l2); free(buf);
}

/* A full tier: a put takes the spare its replaced key left, evicting nothing. */
static void test_full(void)
{
	char *dir = new_dir();
	uint64_t sl = img_len(&ns_small), c = (sl + 4095) & ~4095ull, cap = 16 * c;
	kvt_tier *t = open_tier(dir, cap, 1, NULL);
	kvt_key k[40];
	kvt_tier_stats st;
	int i;

	for (i = 0; i < 40; i++)
		k[i] = key_of(40 + i);
	for (i = 0; i < 16; i++)
		CHECK_EQ(put_one(t, &ns_small, &k[i], 40 + i, KVT_DUR_CRASH_SAFE, NULL), 0);
	for (i = 16; i < 32; i++) {
		ino_t old = ino_of(final_path(dir, &k[i - 16]));
		CHECK_EQ(t->ops->del(t, &k[i - 16]), 0);
		CHECK_EQ(count_dir(dir, "tmp"), 1);
		settle_wait();
		CHECK_EQ(put_one(t, &ns_small, &k[i], 40 + i, KVT_DUR_CRASH_SAFE, NULL), 0);
		CHECK_EQ(count_dir(dir, "tmp"), 0);
		CHECK_EQ(ino_of(final_path(dir, &k[i])), old);
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.chunks, 16);
	CHECK_EQ(st.evictions, 0);
	/* a spare waiting and a new key: the spare gives its room, nothing is evicted */
	CHECK_EQ(t->ops->del(t, &k[16]), 0);
	CHECK_EQ(count_dir(dir, "tmp"), 1);
	CHECK_EQ(put_one(t, &ns_large, &k[32], 99, KVT_DUR_CRASH_SAFE, NULL), KVT_ETOOBIG);
	CHECK_EQ(count_dir(dir, "tmp"), 1); /* given back */
	/* a read in flight keeps the spare from being taken: covered by test_reader */
	CHECK_EQ(put_one(t, &ns_odd, &k[33], 98, KVT_DUR_CRASH_SAFE, NULL), 0); /* takes it */
	CHECK_EQ(count_dir(dir, "tmp"), 0);
	CHECK_EQ(put_one(t, &ns_small, &k[34], 97, KVT_DUR_CRASH_SAFE, NULL), 0); /* evicts one */
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, 1);
	t->ops->close(t);
	CHECK_EQ(count_dir(dir, "tmp"), 0);
	tt_rm_rf(dir);
	free(dir);
}

/* Threads putting, reading and deleting overlapping keys at once: every
 * read is whole or a miss, never wrong bytes, never corrupt. */
struct st_arg { kvt_tier *t; int id; int bad; uint8_t *img[8]; };
static kvt_ns *st_ns[3] = { &ns_small, &ns_odd, &ns_small };

static void *st_run(void *p)
{
	struct st_arg *a = p;
	for (int i = 0; i < 300; i++) {
		int n = (i + a->id) % 8;
		kvt_key k = key_of(1000 + n);
		const kvt_ns *ns = st_ns[n % 3];
		uint64_t len = img_len(ns);
		int rc;
		switch ((i * 7 + a->id) % 3) {
		case 0:
			rc = put_one(a->t, ns, &k, 1000 + n, KVT_DUR_CRASH_SAFE, NULL);
			if (rc && rc != KVT_EEXIST)
				a->bad++, fprintf(stderr, "put %d\n", rc);
			break;
		case 1:
			rc = get_cmp_from(a->t, &k, a->img[n], len, KVT_OBJ_HEADER_BYTES);
			if (rc && rc != KVT_ENOTFOUND)
				a->bad++, fprintf(stderr, "get %d\n", rc);
			break;
		default:
			rc = a->t->ops->del(a->t, &k);
			if (rc && rc != KVT_ENOTFOUND)
				a->bad++, fprintf(stderr, "del %d\n", rc);
		}
	}
	return NULL;
}

static void test_stress(int uring)
{
	char *dir = new_dir();
	kvt_tier *t = open_tier(dir, 1ull << 30, uring, NULL);
	struct st_arg a[6];
	pthread_t th[6];
	uint8_t *img[8];
	int i;

	/* the image of each key: put once, read back, delete */
	for (i = 0; i < 8; i++) {
		kvt_key k = key_of(1000 + i);
		const kvt_ns *ns = st_ns[i % 3];
		img[i] = malloc(img_len(ns));
		CHECK_EQ(put_one(t, ns, &k, 1000 + i, KVT_DUR_CRASH_SAFE, img[i]), 0);
		CHECK_EQ(t->ops->del(t, &k), 0);
	}
	for (i = 0; i < 6; i++) {
		a[i] = (struct st_arg){ t, i, 0, { 0 } };
		memcpy(a[i].img, img, sizeof(img));
		pthread_create(&th[i], NULL, st_run, &a[i]);
	}
	for (i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(a[i].bad, 0);
	}
	{
		kvt_tier_stats st;
		t->ops->stats(t, &st);
		CHECK_EQ(st.corrupt, 0);
		fprintf(stderr, "  stress uring=%d: %llu chunks left, %llu puts\n", uring,
			(unsigned long long)st.chunks, (unsigned long long)st.puts);
	}
	t->ops->close(t);
	CHECK_EQ(count_dir(dir, "tmp"), 0);
	t = open_tier(dir, 1ull << 30, uring, NULL);
	{
		kvt_tier_stats st;
		t->ops->stats(t, &st);
		CHECK_EQ(st.corrupt, 0);
	}
	t->ops->close(t);
	tt_rm_rf(dir);
	free(dir);
	for (i = 0; i < 8; i++)
		free(img[i]);
}

int main(void)
{
	snprintf(base_dir, sizeof(base_dir), "/var/tmp/kvt_spt_XXXXXX");
	if (!mkdtemp(base_dir))
		return 1;
	ns_make(&ns_small, 2, 2, 64, 16, 1);
	ns_make(&ns_large, 28, 4, 128, 256, 2);
	ns_make(&ns_odd, 3, 1, 40, 16, 3);
	for (int u = 0; u <= 1; u++) {
		test_sizes(u);
		test_reader(u);
	}
	test_full();
	test_stress(1);
	test_stress(0);
	tt_rm_rf(base_dir);
	TEST_DONE();
}
