/*
 * Fuzz target for opaque_ops/flex.h and opaque_ops/rawopts.h.
 *
 * libFuzzer (clang):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -Ic/include c/fuzz/flex_fuzz.c -o flex_fuzz
 *   ./flex_fuzz -max_total_time=60 c/fuzz/corpus
 *
 * Standalone replay / smoke driver (gcc, no libFuzzer needed):
 *   gcc -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
 *     -DOO_FUZZ_STANDALONE -Ic/include c/fuzz/flex_fuzz.c -o flex_fuzz_sa
 *   ./flex_fuzz_sa [-s SEED] [-n MUTATIONS] [-r RANDOM] [-t] FILE...
 *     every FILE is run as-is; -t also runs every prefix and suffix of every
 *     file; -n runs that many seeded mutants (bit flips, byte overwrites,
 *     interesting bytes) of the files; -r runs that many random buffers of
 *     length 0..64.  Every input lives in an exactly-sized heap block so ASan
 *     catches a read one past the end.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "opaque_ops/flex.h"
#include "opaque_ops/rawopts.h"

#define OO_FUZZ_MAX_DEPTH 8
#define OO_FUZZ_MAX_ELEMS 64
#define OO_FUZZ_NODE_BUDGET 512

static volatile uint64_t oo_fuzz_sink;
static int oo_fuzz_budget;

static const char* const oo_fuzz_keys[] = {
    "", "T", "a", "b", "ksizes", "padding", "rates", "strides",
    "output_height", "output_width", "zzzz", "\x7f", "\xff",
};

static void oo_fuzz_check(int cond) {
  if (!cond) abort(); /* an invariant of the reader was violated */
}

static void oo_fuzz_touch(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  size_t i;
  for (i = 0; i < n; i++) acc = acc * 31u + p[i];
  oo_fuzz_sink += acc;
}

static void oo_fuzz_walk(oo_flex_ref r, int depth) {
  int64_t i64 = 0;
  uint64_t u64 = 0;
  double d = 0;
  int b = 0, rc_i, rc_u, rc;
  const char* s;
  const uint8_t* p;
  size_t n, k, count;
  oo_flex_ref e;

  if (--oo_fuzz_budget < 0) return;

  rc = oo_flex_type(r);
  oo_fuzz_check(rc == OO_FLEX_ERR_MALFORMED || (rc >= 0 && rc <= 36));
  oo_fuzz_check(oo_flex_strerror(rc) != NULL);

  rc_i = oo_flex_as_int64(r, &i64);
  rc_u = oo_flex_as_uint64(r, &u64);
  if (rc_i == 0 && rc_u == 0) oo_fuzz_check(i64 >= 0 && (uint64_t)i64 == u64);
  if (rc_i == 0 && i64 < 0) oo_fuzz_check(rc_u == OO_FLEX_ERR_RANGE);
  if (oo_flex_as_double(r, &d) == 0) oo_fuzz_sink += (uint64_t)(d == d);
  if (oo_flex_as_bool(r, &b) == 0) oo_fuzz_check(b == 0 || b == 1);
  oo_fuzz_sink += (uint64_t)i64 + u64;

  if (oo_flex_as_string(r, &s, &n) == 0) {
    oo_fuzz_touch((const uint8_t*)s, n + 1);
    oo_fuzz_check(s[n] == '\0');
  }
  if (oo_flex_as_blob(r, &p, &n) == 0) oo_fuzz_touch(p, n);

  if (oo_flex_vector_size(r, &count) != 0) return;
  oo_fuzz_check(oo_flex_vector_at(r, count, &e) == OO_FLEX_ERR_INDEX);
  if (depth >= OO_FUZZ_MAX_DEPTH) return;

  for (k = 0; k < count && k < OO_FUZZ_MAX_ELEMS; k++) {
    rc = oo_flex_vector_at(r, k, &e);
    oo_fuzz_check(rc == 0);
    oo_fuzz_check(e.buf == r.buf && e.len == r.len && e.pos < e.len);
    oo_fuzz_walk(e, depth + 1);
  }

  if (oo_flex_type(r) == OO_FLEX_MAP) {
    for (k = 0; k < sizeof oo_fuzz_keys / sizeof oo_fuzz_keys[0]; k++) {
      if (oo_flex_map_lookup(r, oo_fuzz_keys[k], &e) == 0) oo_fuzz_walk(e, depth + 1);
    }
    for (k = 0; k < count && k < OO_FUZZ_MAX_ELEMS; k++) {
      if (oo_flex_map_key_at(r, k, &s, &n) != 0) continue;
      oo_fuzz_touch((const uint8_t*)s, n + 1);
      oo_fuzz_check(s[n] == '\0' && strlen(s) == n);
      /* Look each stored key up again: exercises the binary search with
       * keys that really occur (found or not, depending on sortedness). */
      rc = oo_flex_map_lookup(r, s, &e);
      oo_fuzz_check(rc <= 0);
    }
    oo_fuzz_check(oo_flex_map_key_at(r, count, &s, &n) != 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oo_flex_ref root, v;
  int64_t ints[8];
  double dbls[8];
  int32_t raw[10];
  size_t n, k;
  const char* s;
  int b;

  oo_fuzz_budget = OO_FUZZ_NODE_BUDGET;
  if (oo_flex_root(data, size, &root) == 0) oo_fuzz_walk(root, 0);

  for (k = 0; k < sizeof oo_fuzz_keys / sizeof oo_fuzz_keys[0]; k++) {
    const char* key = oo_fuzz_keys[k];
    int rc;
    (void)oo_flex_get(data, size, key, &v);
    (void)oo_flex_get_int(data, size, key, &ints[0]);
    (void)oo_flex_get_double(data, size, key, &dbls[0]);
    (void)oo_flex_get_bool(data, size, key, &b);
    if (oo_flex_get_string(data, size, key, &s, &n) == 0) oo_fuzz_check(s[n] == 0);
    rc = oo_flex_get_ints(data, size, key, ints, 8, &n);
    if (rc == 0) oo_fuzz_check(n <= 8);
    if (rc == OO_FLEX_ERR_CAPACITY) oo_fuzz_check(n > 8);
    (void)oo_flex_get_floats(data, size, key, dbls, 8, &n);
    (void)oo_flex_get_ints(data, size, key, NULL, 0, &n);
  }

  for (k = 0; k < 12; k++) {
    int32_t x;
    int rc = oo_raw_i32(data, size, k, &x);
    oo_fuzz_check((rc == 0) == (4 * (k + 1) <= size));
    if (rc == 0) oo_fuzz_sink += (uint32_t)x;
  }
  oo_fuzz_check((oo_raw_i32s(data, size, raw, 10) == 0) == (size >= 40));
  return 0;
}

#ifdef OO_FUZZ_STANDALONE
#include <stdio.h>

static uint64_t oo_rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t oo_rng(void) { /* xorshift64* */
  uint64_t x = oo_rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  oo_rng_state = x;
  return x * 0x2545f4914f6cdd1dull;
}

static unsigned long oo_runs;

/* Run one input from an exactly-sized heap copy. */
static void oo_run(const uint8_t* data, size_t size) {
  uint8_t* copy = (uint8_t*)malloc(size ? size : 1);
  if (!copy) abort();
  if (size) memcpy(copy, data, size);
  LLVMFuzzerTestOneInput(size ? copy : copy + 1, size); /* empty: dangling-end ptr */
  free(copy);
  oo_runs++;
}

static int oo_read_file(const char* path, uint8_t** out, size_t* n) {
  FILE* f = fopen(path, "rb");
  uint8_t* b = NULL;
  size_t cap = 0, len = 0, got;
  if (!f) return -1;
  for (;;) {
    if (len == cap) {
      uint8_t* nb;
      cap = cap ? cap * 2 : 4096;
      nb = (uint8_t*)realloc(b, cap);
      if (!nb) { free(b); fclose(f); return -1; }
      b = nb;
    }
    got = fread(b + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  fclose(f);
  *out = b;
  *n = len;
  return 0;
}

int main(int argc, char** argv) {
  static const uint8_t interesting[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x08, 0x10, 0x24,
                                        0x25, 0x28, 0x7f, 0x80, 0xfe, 0xff, 0x90, 0x64};
  unsigned long mutations = 0, randoms = 0, i;
  int truncations = 0, nfiles = 0, a;
  uint8_t* files[256];
  size_t sizes[256];
  uint8_t scratch[4096];

  for (a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-s") && a + 1 < argc) {
      oo_rng_state = strtoull(argv[++a], NULL, 0) * 2654435761u + 1;
    } else if (!strcmp(argv[a], "-n") && a + 1 < argc) {
      mutations = strtoul(argv[++a], NULL, 0);
    } else if (!strcmp(argv[a], "-r") && a + 1 < argc) {
      randoms = strtoul(argv[++a], NULL, 0);
    } else if (!strcmp(argv[a], "-t")) {
      truncations = 1;
    } else if (nfiles < 256) {
      if (oo_read_file(argv[a], &files[nfiles], &sizes[nfiles]) != 0) {
        fprintf(stderr, "flex_fuzz: cannot read %s\n", argv[a]);
        return 2;
      }
      nfiles++;
    }
  }

  for (a = 0; a < nfiles; a++) {
    size_t k;
    oo_run(files[a], sizes[a]);
    if (!truncations) continue;
    for (k = 0; k < sizes[a]; k++) {
      oo_run(files[a], k);                        /* prefix: root moves */
      oo_run(files[a] + k + 1, sizes[a] - k - 1); /* suffix: offsets dangle */
    }
  }

  for (i = 0; i < mutations && nfiles > 0; i++) {
    int f = (int)(oo_rng() % (uint64_t)nfiles);
    size_t n = sizes[f] < sizeof scratch ? sizes[f] : sizeof scratch, m, nm;
    memcpy(scratch, files[f], n);
    if (n == 0) { oo_run(scratch, 0); continue; }
    nm = 1 + (size_t)(oo_rng() % 4);
    for (m = 0; m < nm; m++) {
      /* bias towards the tail, where the root and the map headers live */
      size_t at = (oo_rng() & 1) ? (size_t)(oo_rng() % n)
                                 : n - 1 - (size_t)(oo_rng() % (n < 16 ? n : 16));
      switch (oo_rng() % 3) {
        case 0: scratch[at] ^= (uint8_t)(1u << (oo_rng() % 8)); break;
        case 1: scratch[at] = (uint8_t)oo_rng(); break;
        default: scratch[at] = interesting[oo_rng() % sizeof interesting]; break;
      }
    }
    if (oo_rng() % 8 == 0) n -= (size_t)(oo_rng() % n); /* sometimes truncate too */
    oo_run(scratch, n);
  }

  for (i = 0; i < randoms; i++) {
    size_t n = (size_t)(oo_rng() % 65), k;
    for (k = 0; k < n; k++) scratch[k] = (uint8_t)oo_rng();
    /* half the time make the trailing width byte valid to get past the root */
    if (n > 0 && (oo_rng() & 1)) scratch[n - 1] = (uint8_t)(1u << (oo_rng() % 4));
    oo_run(scratch, n);
  }

  for (a = 0; a < nfiles; a++) free(files[a]);
  printf("flex_fuzz: %lu inputs ok (sink %llu)\n", oo_runs,
         (unsigned long long)(oo_fuzz_sink & 0xff));
  return 0;
}
#endif /* OO_FUZZ_STANDALONE */
