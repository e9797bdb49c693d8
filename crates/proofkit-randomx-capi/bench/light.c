/*
 * Light-mode timing through the C API, for comparing librandomx builds side by side: run the
 * same binary with and without LD_LIBRARY_PATH (see README.md). Usage: light [hashes] [flags]
 * where flags defaults to randomx_get_flags(). Prints the library loaded, cache init seconds
 * and milliseconds per v1 hash (median of 3 runs of `hashes` hashes).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <randomx.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int hashes = argc > 1 ? atoi(argv[1]) : 20;
  randomx_flags flags = argc > 2 ? (randomx_flags)atoi(argv[2]) : randomx_get_flags();
  Dl_info info;
  dladdr((void *)&randomx_get_flags, &info);
  randomx_cache *cache = randomx_alloc_cache(flags & (RANDOMX_FLAG_JIT | RANDOMX_FLAG_ARGON2));
  if (!cache) return 1;
  double t0 = now();
  randomx_init_cache(cache, "bench key", 9);
  double init = now() - t0;
  randomx_vm *vm = randomx_create_vm(flags & ~RANDOMX_FLAG_FULL_MEM, cache, NULL);
  if (!vm) return 1;
  unsigned char out[32];
  unsigned long nonce = 0;
  double runs[3];
  for (int r = 0; r < 3; r++) {
    t0 = now();
    for (int i = 0; i < hashes; i++, nonce++) randomx_calculate_hash(vm, &nonce, sizeof nonce, out);
    runs[r] = (now() - t0) * 1e3 / hashes;
  }
  qsort(runs, 3, sizeof runs[0], cmp);
  printf("%s flags=%d cache_init_s=%.3f ms_per_hash=%.2f\n", info.dli_fname, (int)flags, init,
         runs[1]);
  randomx_destroy_vm(vm);
  randomx_release_cache(cache);
  return 0;
}
