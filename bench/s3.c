/*
 * s3.c — `kvtier-bench s3`: S3 tier PUT and GET throughput for 14 and
 * 32 MiB chunks (Qwen2.5-7B and Llama-3.1-8B 256-token bf16 chunks) against
 * two bounds measured in the same run on the same server:
 *
 *   curl:   one curl process moving the same N objects one after another
 *           over one reused connection, same signing mode:
 *             curl -sS --aws-sigv4 aws:amz:REGION:s3 --user AK:SK
 *                  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD"
 *                  -T f1 URL1 -T f2 URL2 ...        (upload)
 *                  URL1 -o /dev/null URL2 -o /dev/null ...   (download)
 *   awscli: aws s3 cp --recursive DIR s3://BUCKET/PFX/ --endpoint-url EP
 *           and back into a fresh directory.
 *
 * kvtier moves the N objects one after another too, with the tier's
 * defaults: objects up to multipart_bytes (64 MiB) as one PUT / one GET,
 * larger ones as parallel parts / ranges.  Same bytes, same signing mode
 * (SigV4, UNSIGNED-PAYLOAD), same server; kvtier's PUT time includes the
 * copy into the tier's write buffer, its GET time the allocation of the
 * image (curl writes to /dev/null).  Rounds run kvtier, curl, awscli in
 * turn; throughputs are medians over rounds and a ratio is the median of
 * the per-round ratios (the server shares the machine's cores with the
 * client, so only same-round numbers are comparable).
 * Without --endpoint the bench starts the S3 test server (tests/s3/server.js:
 * s3rver, SigV4 checked) from the copy the build puts in bench-data/s3 next
 * to this program, through the start-up the tests use (tests/s3/server.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli/cli.h"
#include "common/hex.h"
#include "format/object.h"
#include "s3/server.h"
#include "tier/s3.h"

#define S3B_AK S3SRV_ACCESS_KEY
#define S3B_SK S3SRV_SECRET_KEY

static int s3b_sh(const char *cmd)
{
	int rc = system(cmd);

	if (rc != 0)
		fprintf(stderr, "kvtier-bench s3: failed (%d): %.300s\n", rc, cmd);
	return rc;
}

/* server.js from the copy the build made (bench-data/s3, whose
 * node_modules links to the repository's tests/s3/node_modules). */
static int s3b_server(const char *dir, s3srv *srv, char *ep, size_t cap)
{
	char script[4096], why[4200];

	if (!bench_data_path("s3/server.js", script, sizeof(script))) {
		fprintf(stderr, "kvtier-bench s3: %s not found: the build copies it there "
			"(cmake --build); or pass --endpoint URL\n", script);
		return -1;
	}
	if (s3srv_start(srv, script, dir, (const char *const[]){ "kvt", NULL }, why,
			sizeof(why))) {
		fprintf(stderr, "kvtier-bench s3: the S3 server did not start: %s\n", why);
		return -1;
	}
	/* The bench talks to s3rver directly, not through the fault proxy. */
	snprintf(ep, cap, "http://127.0.0.1:%d", srv->s3rver_port);
	return 0;
}

/* --- the existence cache ---------------------------------------------------
 *
 * --index N: the tier's index alone, no server (the default run ends with
 * it too, at 1,000,000 objects, 100,000 with --quick).  N objects named like
 * chunks, 1000 a page, with LastModified spread over 30 days, go through
 * the tier's own listing parser and fill (kvt_s3_refresh_pages, the refresh
 * minus HTTP) into a tier whose capacity they fill exactly; then the tier
 * evicts what a put of --evict-pct of its capacity needs, oldest first,
 * with the deletes in the bucket left out (kvt_s3_evict_index).  The bound,
 * measured in the same round: qsort(3) of the N keys.  evict_ratio_vs_qsort
 * is the eviction's time over it, fill_ratio_vs_qsort the fill's
 * (page generation included, about a third of it). */

#define S3B_IX_PAGE 1000
#define S3B_IX_SIZE (14ull * 1048576 + 4096) /* a 14 MiB chunk's image */

typedef struct s3b_pages {
	uint64_t n, done;
	unsigned page;
	char *buf;
	size_t cap;
} s3b_pages;

static void s3b_ix_key(kvt_key *k, uint64_t i)
{
	bench_chunk_key(k, 7, 4, i, "bench_ix");
}

static int s3b_ix_next(void *arg, const char **xml, size_t *len)
{
	s3b_pages *p = arg;
	uint64_t end = p->done + S3B_IX_PAGE < p->n ? p->done + S3B_IX_PAGE : p->n;
	size_t o;

	p->page++;
	o = (size_t)snprintf(p->buf, p->cap,
			     "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
			     "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
			     "<Name>kvt</Name><Prefix>idx/</Prefix><KeyCount>%" PRIu64
			     "</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>%s</IsTruncated>"
			     "<NextContinuationToken>page-%u</NextContinuationToken>",
			     end - p->done, end < p->n ? "true" : "false", p->page);
	for (; p->done < end; p->done++) {
		/* 30 days of mtimes from 2026-10-01, in no order by name. */
		time_t mt = (time_t)1790812800 + (time_t)((p->done * 2654435761u) % (30 * 86400));
		char hex[2 * KVT_KEY_BYTES + 1], lm[32];
		struct tm tm;
		kvt_key k;

		s3b_ix_key(&k, p->done);
		kvt_hex_encode(k.b, KVT_KEY_BYTES, hex);
		gmtime_r(&mt, &tm);
		strftime(lm, sizeof(lm), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
		o += (size_t)snprintf(p->buf + o, p->cap - o,
				      "<Contents><Key>idx/%.2s/%s.kvt</Key><LastModified>%s</LastModified>"
				      "<ETag>&quot;%.32s&quot;</ETag><Size>%llu</Size>"
				      "<StorageClass>STANDARD</StorageClass></Contents>",
				      hex, hex, lm, hex, S3B_IX_SIZE);
	}
	o += (size_t)snprintf(p->buf + o, p->cap - o, "</ListBucketResult>");
	*xml = p->buf;
	*len = o;
	return 0;
}

static int s3b_key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, KVT_KEY_BYTES);
}

/* The figures, as "index":{...} under --json (the caller writes what is
 * around it), else one line.  0 or 1 (said why). */
static int s3b_index(uint64_t n, double pct, int rounds, int json)
{
	double fill[BENCH_MAX_ROUNDS] = { 0 }, ev[BENCH_MAX_ROUNDS] = { 0 }, qs[BENCH_MAX_ROUNDS] = { 0 };
	double rev[BENCH_MAX_ROUNDS] = { 0 }, rfill[BENCH_MAX_ROUNDS] = { 0 };
	uint64_t victims = 0, i;
	kvt_key *keys = malloc(n * sizeof(*keys));
	s3b_pages p = { .cap = S3B_IX_PAGE * 400 + 1024 };
	int r, rc = 0;

	p.buf = malloc(p.cap);
	if (!keys || !p.buf) {
		fprintf(stderr, "kvtier-bench s3: no memory for %" PRIu64 " keys\n", n);
		free(keys);
		free(p.buf);
		return 1;
	}
	for (r = 0; r < rounds && !rc; r++) {
		kvt_s3_opts o;
		kvt_tier *t = NULL;
		kvt_tier_stats st;
		double t0;

		/* Nothing listens on port 1: the open's listing fails at once
		 * (one error line) and the tier starts empty. */
		memset(&o, 0, sizeof(o));
		o.endpoint = "http://127.0.0.1:1";
		o.region = "us-east-1";
		o.bucket = "kvt";
		o.prefix = "idx/";
		o.path_style = 1;
		o.access_key = S3B_AK;
		o.secret_key = S3B_SK;
		o.retries = -1;
		o.timeout_ms = 2000;
		o.capacity = n * S3B_IX_SIZE;
		if ((rc = kvt_s3_open(&o, &t))) {
			fprintf(stderr, "kvtier-bench s3: open: %s\n", kvt_errmsg());
			break;
		}
		p.n = n;
		p.done = 0;
		p.page = 0;
		t0 = cli_now();
		rc = kvt_s3_refresh_pages(t, s3b_ix_next, &p);
		fill[r] = cli_now() - t0;
		t->ops->stats(t, &st);
		if (rc || st.chunks != n) {
			fprintf(stderr, "kvtier-bench s3: the fill indexed %" PRIu64 " of %" PRIu64
				" objects: %s\n", st.chunks, n, rc ? kvt_errmsg() : "");
			t->ops->close(t);
			rc = 1;
			break;
		}
		t0 = cli_now();
		victims = kvt_s3_evict_index(t, (uint64_t)(pct / 100.0 * (double)o.capacity));
		ev[r] = cli_now() - t0;
		t->ops->close(t);

		for (i = 0; i < n; i++)
			s3b_ix_key(&keys[i], i);
		t0 = cli_now();
		qsort(keys, n, sizeof(*keys), s3b_key_cmp);
		qs[r] = cli_now() - t0;
		rev[r] = ev[r] / qs[r];
		rfill[r] = fill[r] / qs[r];
	}
	free(keys);
	free(p.buf);
	if (rc)
		return 1;
	{
		struct summary sf = bench_summarize(fill, rounds), se = bench_summarize(ev, rounds);
		struct summary sq = bench_summarize(qs, rounds);
		struct summary sre = bench_summarize(rev, rounds), srf = bench_summarize(rfill, rounds);
		if (json) {
			printf("\"index\":{\"objects\":%" PRIu64 ",\"victims\":%" PRIu64
			       ",\"rounds\":%d,", n, victims, rounds);
			bench_json_summary("fill_s", sf);
			printf(",");
			bench_json_summary("evict_s", se);
			printf(",");
			bench_json_summary("qsort_s", sq);
			printf(",\"evict_us_per_victim\":%.3f,\"evict_ratio_vs_qsort\":%.4g,"
			       "\"fill_ratio_vs_qsort\":%.3f}",
			       victims ? se.median * 1e6 / (double)victims : 0, sre.median, srf.median);
		} else {
			printf("index of %" PRIu64 " listed objects: fill %.3f s (%.2fx qsort of the keys, "
			       "%.3f s); evict %" PRIu64 " (%.3g%% of capacity) %.4f s, %.2f us each "
			       "(%.4gx qsort)\n",
			       n, sf.median, srf.median, sq.median, victims, pct, se.median,
			       victims ? se.median * 1e6 / (double)victims : 0, sre.median);
		}
	}
	return 0;
}

int bench_s3(int argc, char **argv)
{
	static const struct { const char *name; uint32_t layers, heads; } shapes[2] = {
		{ "14MiB", 28, 4 }, { "32MiB", 32, 8 },
	};
	int json = 0, quick = 0, rounds, nobj, i, s, r, rc = 0;
	const char *endpoint = NULL;
	uint64_t index_n = 0;
	double evict_pct = 10;
	int index_mode = 0;
	char ep[256], dir[256], sdir[300], cmd[16384];
	double kp[2][BENCH_MAX_ROUNDS], kg[2][BENCH_MAX_ROUNDS];
	double cp[2][BENCH_MAX_ROUNDS], cg[2][BENCH_MAX_ROUNDS];
	double ap[2][BENCH_MAX_ROUNDS], ag[2][BENCH_MAX_ROUNDS];
	double rp[2][BENCH_MAX_ROUNDS], rg[2][BENCH_MAX_ROUNDS]; /* paired */
	int have_aws = system("aws --version >/dev/null 2>&1") == 0;
	s3srv srv = S3SRV_NONE;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--endpoint") && i + 1 < argc)
			endpoint = argv[++i];
		else if (!strcmp(argv[i], "--index") && i + 1 < argc) {
			index_mode = 1;
			index_n = strtoull(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--evict-pct") && i + 1 < argc) {
			index_mode = 1;
			evict_pct = strtod(argv[++i], NULL);
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: kvtier-bench s3 [--json] [--quick] [--endpoint URL]\n"
			       "       kvtier-bench s3 --index N [--evict-pct P] [--json] [--quick]\n\n"
			       "The S3 tier's PUT and GET of 14 and 32 MiB chunks against one curl\n"
			       "process and the AWS CLI moving the same objects to the same server,\n"
			       "paired per round (put/get_ratio_vs_curl, _vs_awscli).  Without\n"
			       "--endpoint it starts the S3 test server (bench-data/s3/server.js).\n"
			       "The run ends with --index 1000000 (100000 with --quick).\n"
			       "--index N: the existence cache alone, no server: N listed objects\n"
			       "through the listing parser and fill, then eviction of P%% (10) of\n"
			       "the capacity, against a qsort of the N keys (evict_ratio_vs_qsort).\n");
			return 0;
		} else {
			fprintf(stderr, "usage: kvtier-bench s3 [--json] [--quick] [--endpoint URL] "
				"[--index N [--evict-pct P]]\n");
			return 2;
		}
	}
	if (index_mode) {
		if (index_n < 1 || index_n > 100000000 || !(evict_pct > 0 && evict_pct <= 100)) {
			fprintf(stderr, "kvtier-bench s3: --index wants 1..100000000 objects and "
				"--evict-pct a percentage in (0, 100]\n");
			return 2;
		}
		if (json)
			printf("{\"bench\":\"s3\",");
		rc = s3b_index(index_n, evict_pct, quick ? 1 : 3, json);
		if (json && !rc)
			printf("}\n");
		return rc;
	}
	rounds = quick ? 3 : 5;
	nobj = quick ? 4 : 8;
	if ((rc = bench_scratch_dir("s3", "/tmp", "s3", dir, sizeof(dir))))
		return rc;
	if (!endpoint) {
		if (bench_path_join(sdir, sizeof(sdir), dir, "server") || mkdir(sdir, 0700) ||
		    s3b_server(sdir, &srv, ep, sizeof(ep))) {
			bench_remove_tree(dir);
			return 1;
		}
		endpoint = ep;
	}
	setenv("AWS_ACCESS_KEY_ID", S3B_AK, 0);
	setenv("AWS_SECRET_ACCESS_KEY", S3B_SK, 0);
	setenv("AWS_DEFAULT_REGION", "us-east-1", 0);

	for (s = 0; s < 2 && !rc; s++) {
		kvt_ns ns;
		uint64_t len = 0;
		uint8_t **img = calloc((size_t)nobj, sizeof(*img));
		kvt_key *keys = calloc((size_t)nobj, sizeof(*keys));

		memset(&ns, 0, sizeof(ns));
		ns.layout = (kvt_layout){ .num_layers = shapes[s].layers,
					  .num_kv_heads = shapes[s].heads, .head_dim = 128,
					  .dtype = KVT_DTYPE_BF16, .kv_planes = 2,
					  .block_size = 16, .chunk_tokens = 256 };
		ns.hash_scheme = KVT_HASH_SHA256;
		ns.tp_size = ns.pp_size = 1;
		len = KVT_OBJ_HEADER_BYTES + kvt_layout_payload_bytes(&ns.layout);
		snprintf(cmd, sizeof(cmd), "mkdir -p %s/%s/up %s/%s/down", dir,
			 shapes[s].name, dir, shapes[s].name);
		s3b_sh(cmd);
		for (i = 0; i < nobj; i++) {
			kvt_obj_hdr h;
			char path[1024];
			FILE *f;
			img[i] = bench_buffer(len);
			bench_chunk_key(&keys[i], (uint32_t)s, 3, (uint64_t)i, "bench_s3");
			kvt_obj_hdr_init(&h, &ns, &keys[i]);
			kvt_obj_hdr_encode(&h, img[i]);
			memset(img[i] + KVT_OBJ_HEADER_BYTES, i + 1, len - KVT_OBJ_HEADER_BYTES);
			snprintf(path, sizeof(path), "%s/%s/up/%d.kvt", dir, shapes[s].name, i);
			f = fopen(path, "wb");
			if (!f || fwrite(img[i], 1, len, f) != len)
				rc = 1;
			if (f)
				fclose(f);
		}
		for (r = 0; r < rounds && !rc; r++) {
			kvt_s3_opts o;
			kvt_tier *t = NULL;
			char pfx[64], url[512];
			size_t cl;
			double t0;

			/* kvtier */
			memset(&o, 0, sizeof(o));
			snprintf(pfx, sizeof(pfx), "k%s-%d/", shapes[s].name, r);
			o.endpoint = endpoint;
			o.region = "us-east-1";
			o.bucket = "kvt";
			o.prefix = pfx;
			o.path_style = 1;
			o.timeout_ms = 120000;
			if (kvt_s3_open(&o, &t)) {
				fprintf(stderr, "kvtier-bench s3: open: %s\n", kvt_errmsg());
				rc = 1;
				break;
			}
			t0 = cli_now();
			for (i = 0; i < nobj && !rc; i++) {
				kvt_tier_wbuf *w;
				if (t->ops->put_begin(t, &keys[i], len, &w)) {
					rc = 1;
					break;
				}
				memcpy(w->iov[0].iov_base, img[i], len);
				if (t->ops->put_commit(t, w, KVT_DUR_CACHED))
					rc = 1;
			}
			kp[s][r] = (double)nobj * len / (cli_now() - t0) / 1e6;
			t0 = cli_now();
			for (i = 0; i < nobj && !rc; i++) {
				kvt_tier_rbuf *rb;
				if (t->ops->get(t, &keys[i], &rb)) {
					rc = 1;
					break;
				}
				t->ops->release(t, rb);
			}
			kg[s][r] = (double)nobj * len / (cli_now() - t0) / 1e6;
			t->ops->close(t);
			if (rc) {
				fprintf(stderr, "kvtier-bench s3: kvtier I/O failed: %s\n", kvt_errmsg());
				break;
			}

			/* curl: one process, N transfers in sequence */
			cl = (size_t)snprintf(cmd, sizeof(cmd),
					      "curl -sS -f --aws-sigv4 aws:amz:us-east-1:s3 --user %s:%s "
					      "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD'",
					      getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"));
			for (i = 0; i < nobj; i++) {
				snprintf(url, sizeof(url), "%s/kvt/c%s-%d/%d.kvt", endpoint, shapes[s].name, r, i);
				cl += (size_t)snprintf(cmd + cl, sizeof(cmd) - cl, " -T %s/%s/up/%d.kvt %s",
						       dir, shapes[s].name, i, url);
			}
			snprintf(cmd + cl, sizeof(cmd) - cl, " -o /dev/null");
			t0 = cli_now();
			rc |= s3b_sh(cmd) != 0;
			cp[s][r] = (double)nobj * len / (cli_now() - t0) / 1e6;
			cl = (size_t)snprintf(cmd, sizeof(cmd),
					      "curl -sS -f --aws-sigv4 aws:amz:us-east-1:s3 --user %s:%s "
					      "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD'",
					      getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"));
			for (i = 0; i < nobj; i++)
				cl += (size_t)snprintf(cmd + cl, sizeof(cmd) - cl,
						       " %s/kvt/c%s-%d/%d.kvt -o /dev/null",
						       endpoint, shapes[s].name, r, i);
			t0 = cli_now();
			rc |= s3b_sh(cmd) != 0;
			cg[s][r] = (double)nobj * len / (cli_now() - t0) / 1e6;

			/* The server shares the machine: compare within a round. */
			rp[s][r] = kp[s][r] / cp[s][r];
			rg[s][r] = kg[s][r] / cg[s][r];

			/* awscli */
			ap[s][r] = ag[s][r] = 0;
			if (have_aws) {
				snprintf(cmd, sizeof(cmd),
					 "aws s3 cp --quiet --recursive %s/%s/up s3://kvt/a%s-%d/ --endpoint-url %s",
					 dir, shapes[s].name, shapes[s].name, r, endpoint);
				t0 = cli_now();
				rc |= s3b_sh(cmd) != 0;
				ap[s][r] = (double)nobj * len / (cli_now() - t0) / 1e6;
				snprintf(cmd, sizeof(cmd),
					 "rm -rf %s/%s/down && aws s3 cp --quiet --recursive s3://kvt/a%s-%d/ %s/%s/down --endpoint-url %s",
					 dir, shapes[s].name, shapes[s].name, r, dir, shapes[s].name, endpoint);
				t0 = cli_now();
				rc |= s3b_sh(cmd) != 0;
				ag[s][r] = (double)nobj * len / (cli_now() - t0) / 1e6;
			}
		}
		for (i = 0; i < nobj; i++)
			free(img[i]);
		free(img);
		free(keys);
	}
	if (!rc) {
		if (json)
			printf("{\"bench\":\"s3\",\"rounds\":%d,\"objects\":%d,\"endpoint\":\"%s\",\"sizes\":{",
			       rounds, nobj, endpoint);
		for (s = 0; s < 2; s++) {
			struct summary skp = bench_summarize(kp[s], rounds), skg = bench_summarize(kg[s], rounds);
			struct summary scp = bench_summarize(cp[s], rounds), scg = bench_summarize(cg[s], rounds);
			struct summary sap = bench_summarize(ap[s], rounds), sag = bench_summarize(ag[s], rounds);
			struct summary srp = bench_summarize(rp[s], rounds), srg = bench_summarize(rg[s], rounds);
			if (json) {
				printf("%s\"%s\":{", s ? "," : "", shapes[s].name);
				bench_json_summary("put_mbps", skp);
				printf(",");
				bench_json_summary("get_mbps", skg);
				printf(",");
				bench_json_summary("curl_put_mbps", scp);
				printf(",");
				bench_json_summary("curl_get_mbps", scg);
				printf(",");
				bench_json_summary("awscli_put_mbps", sap);
				printf(",");
				bench_json_summary("awscli_get_mbps", sag);
				printf(",\"put_ratio_vs_curl\":%.3f,\"get_ratio_vs_curl\":%.3f,"
				       "\"put_ratio_vs_awscli\":%.3f,\"get_ratio_vs_awscli\":%.3f}",
				       srp.median, srg.median,
				       sap.median > 0 ? skp.median / sap.median : 0,
				       sag.median > 0 ? skg.median / sag.median : 0);
			} else {
				printf("%s x %d: PUT %.0f MB/s (%.2fx curl %.0f, %.2fx aws s3 cp %.0f)  "
				       "GET %.0f MB/s (%.2fx curl %.0f, %.2fx aws s3 cp %.0f)\n",
				       shapes[s].name, nobj, skp.median, srp.median, scp.median,
				       sap.median > 0 ? skp.median / sap.median : 0, sap.median,
				       skg.median, srg.median, scg.median,
				       sag.median > 0 ? skg.median / sag.median : 0, sag.median);
			}
		}
		if (json)
			printf("},");
		/* The existence cache too: fast since it is no longer O(n^2). */
		rc = s3b_index(quick ? 100000 : 1000000, 10, quick ? 1 : 3, json);
		if (json)
			printf("}\n");
	}
	s3srv_stop(&srv);
	if (bench_remove_tree(dir))
		rc = 1;
	return rc;
}
