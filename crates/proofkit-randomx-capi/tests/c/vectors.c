/*
 * Drives proofkit's librandomx through the C API of OUR include/randomx.h. Commands come one
 * per line on stdin; each prints one line on stdout, which tests/c_api.rs checks against
 * shared/vectors/randomx.json and against proofkit_randomx's Rust API. Hex strings are raw
 * bytes; "-" is the empty string.
 *
 *   lib                      path of the shared object that provides randomx_get_flags
 *   flags                    randomx_get_flags()
 *   itemcount                randomx_dataset_item_count()
 *   key HEX                  randomx_init_cache(cache, HEX)   (prints the cache memory address)
 *   setcache                 randomx_vm_set_cache on every VM
 *   word N                   u64 word N of randomx_get_cache_memory
 *   hash VM HEX              randomx_calculate_hash on VM: v1, v2 (interpreter, software AES),
 *                            v1h (HARD_AES|JIT), v2h (HARD_AES|JIT|SECURE)
 *   batch VM HEX HEX HEX     first/next/next/last on VM; prints the three hashes
 *   orphan VM                hash_last and hash_next without a pending hash_first (zeros)
 *   commit HEX HASHHEX       randomx_calculate_commitment
 *   items START COUNT        randomx_init_dataset then every word of those items
 *   rounding VM HEX          hash with the rounding mode set to upward; prints the hash and
 *                            whether the mode was left as it was
 *   nulls                    NULL-return and NULL-argument cases, as name=0/1 pairs
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "randomx.h"

static randomx_cache *cache;
static randomx_dataset *dataset;
static randomx_vm *vms[4];
static const char *vm_names[4] = {"v1", "v2", "v1h", "v2h"};
static const randomx_flags vm_flags[4] = {
    RANDOMX_FLAG_DEFAULT, RANDOMX_FLAG_V2,
    RANDOMX_FLAG_HARD_AES | RANDOMX_FLAG_JIT,
    RANDOMX_FLAG_HARD_AES | RANDOMX_FLAG_JIT | RANDOMX_FLAG_SECURE | RANDOMX_FLAG_V2};

static size_t unhex(const char *s, unsigned char *out, size_t cap) {
  if (strcmp(s, "-") == 0) return 0;
  size_t n = strlen(s) / 2;
  if (n > cap) { fprintf(stderr, "hex too long\n"); exit(2); }
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) { fprintf(stderr, "bad hex\n"); exit(2); }
    out[i] = (unsigned char)v;
  }
  return n;
}

static void put_hex(const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
}

static randomx_vm *vm_named(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, vm_names[i]) == 0) return vms[i];
  fprintf(stderr, "no vm %s\n", name);
  exit(2);
}

static void make_vms(void) {
  for (int i = 0; i < 4; i++) {
    if (vms[i] != NULL) continue;
    vms[i] = randomx_create_vm(vm_flags[i], cache, NULL);
    /* Only the HARD_AES VMs may be missing (a CPU without AES-NI). */
    if (vms[i] == NULL && !(vm_flags[i] & RANDOMX_FLAG_HARD_AES)) {
      fprintf(stderr, "randomx_create_vm(%d) failed\n", vm_flags[i]);
      exit(2);
    }
  }
}

static void nulls(void) {
  unsigned char out[32], in[4] = {1, 2, 3, 4};
  memset(out, 0xAA, sizeof out);
  /* Documented NULL returns. */
  printf("light_vm_without_cache=%d ", randomx_create_vm(RANDOMX_FLAG_DEFAULT, NULL, NULL) == NULL);
  printf("full_vm_without_dataset=%d ", randomx_create_vm(RANDOMX_FLAG_FULL_MEM, cache, NULL) == NULL);
  randomx_cache *fresh = randomx_alloc_cache(RANDOMX_FLAG_DEFAULT);
  printf("light_vm_unkeyed_cache=%d ", randomx_create_vm(RANDOMX_FLAG_DEFAULT, fresh, NULL) == NULL);
  printf("unkeyed_cache_memory=%d ", randomx_get_cache_memory(fresh) != NULL);
  randomx_release_cache(fresh);
  randomx_cache *large = randomx_alloc_cache(RANDOMX_FLAG_LARGE_PAGES);
  printf("large_pages_cache=%d ", large != NULL);
  if (large) randomx_release_cache(large);
  randomx_vm *large_vm = randomx_create_vm(RANDOMX_FLAG_LARGE_PAGES, cache, NULL);
  printf("large_pages_vm=%d ", large_vm != NULL);
  if (large_vm) randomx_destroy_vm(large_vm);
  randomx_cache *avx2 = randomx_alloc_cache(RANDOMX_FLAG_ARGON2_AVX2);
  printf("argon2_avx2_cache=%d ", avx2 != NULL);
  if (avx2) randomx_release_cache(avx2);
  randomx_cache *ssse3 = randomx_alloc_cache(RANDOMX_FLAG_ARGON2_SSSE3);
  printf("argon2_ssse3_cache=%d ", ssse3 != NULL);
  if (ssse3) randomx_release_cache(ssse3);
  /* NULL arguments where the reference would crash: ignored, nothing written. */
  randomx_calculate_hash(NULL, in, sizeof in, out);
  randomx_calculate_hash(vms[0], NULL, 4, out);
  randomx_calculate_hash(vms[0], in, sizeof in, NULL);
  randomx_calculate_hash_first(NULL, in, sizeof in);
  randomx_calculate_hash_next(NULL, in, sizeof in, out);
  randomx_calculate_hash_last(NULL, out);
  randomx_calculate_commitment(in, sizeof in, NULL, out);
  randomx_calculate_commitment(in, sizeof in, out, NULL);
  randomx_init_cache(NULL, in, sizeof in);
  randomx_init_cache(cache, NULL, 4);
  randomx_init_dataset(NULL, cache, 0, 1);
  randomx_vm_set_cache(NULL, cache);
  randomx_vm_set_cache(vms[0], NULL);
  randomx_vm_set_dataset(vms[0], NULL);
  randomx_release_cache(NULL);
  randomx_release_dataset(NULL);
  randomx_destroy_vm(NULL);
  int untouched = 1;
  for (int i = 0; i < 32; i++) untouched &= out[i] == 0xAA;
  printf("outputs_untouched=%d ", untouched);
  printf("null_memory=%d\n",
         randomx_get_cache_memory(NULL) == NULL && randomx_get_dataset_memory(NULL) == NULL);
}

int main(void) {
  static char line[1 << 16];
  static unsigned char a[4096], b[4096], c[4096];
  unsigned char h1[32], h2[32], h3[32];
  cache = randomx_alloc_cache(RANDOMX_FLAG_DEFAULT);
  if (cache == NULL) { fprintf(stderr, "randomx_alloc_cache failed\n"); return 2; }
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32], x[8192], y[8192], z[8192];
    x[0] = y[0] = z[0] = 0;
    int n = sscanf(line, "%31s %8191s %8191s %8191s", cmd, x, y, z);
    if (n < 1) continue;
    if (!strcmp(cmd, "lib")) {
      Dl_info info;
      if (!dladdr((void *)&randomx_get_flags, &info) || !info.dli_fname) return 3;
      printf("lib %s\n", info.dli_fname);
    } else if (!strcmp(cmd, "flags")) {
      printf("flags %d\n", (int)randomx_get_flags());
    } else if (!strcmp(cmd, "itemcount")) {
      printf("itemcount %lu\n", randomx_dataset_item_count());
    } else if (!strcmp(cmd, "key")) {
      size_t k = unhex(x, a, sizeof a);
      randomx_init_cache(cache, a, k);
      make_vms();
      printf("key %p\n", randomx_get_cache_memory(cache));
    } else if (!strcmp(cmd, "setcache")) {
      for (int i = 0; i < 4; i++)
        if (vms[i]) randomx_vm_set_cache(vms[i], cache);
      printf("setcache\n");
    } else if (!strcmp(cmd, "word")) {
      const uint64_t *w = (const uint64_t *)randomx_get_cache_memory(cache);
      printf("word 0x%016llx\n", (unsigned long long)w[strtoull(x, NULL, 10)]);
    } else if (!strcmp(cmd, "hash")) {
      randomx_vm *vm = vm_named(x);
      if (!vm) { printf("hash NA\n"); continue; }
      size_t k = unhex(y, a, sizeof a);
      /* A 0-byte input is passed as NULL, which the API allows. */
      randomx_calculate_hash(vm, k ? a : NULL, k, h1);
      printf("hash "); put_hex(h1, 32); printf("\n");
    } else if (!strcmp(cmd, "batch")) {
      randomx_vm *vm = vm_named(x);
      if (!vm) { printf("batch NA\n"); continue; }
      size_t ka = unhex(y, a, sizeof a), kb = unhex(z, b, sizeof b);
      char w[8192];
      if (sscanf(line, "%*s %*s %*s %*s %8191s", w) != 1) return 2;
      size_t kc = unhex(w, c, sizeof c);
      randomx_calculate_hash_first(vm, a, ka);
      randomx_calculate_hash_next(vm, b, kb, h1);
      randomx_calculate_hash_next(vm, c, kc, h2);
      randomx_calculate_hash_last(vm, h3);
      printf("batch "); put_hex(h1, 32); printf(" "); put_hex(h2, 32); printf(" ");
      put_hex(h3, 32); printf("\n");
    } else if (!strcmp(cmd, "orphan")) {
      randomx_vm *vm = vm_named(x);
      memset(h1, 0xAA, 32); memset(h2, 0xAA, 32);
      randomx_calculate_hash_last(vm, h1);
      randomx_calculate_hash_next(vm, "x", 1, h2);
      randomx_calculate_hash_last(vm, h3); /* finishes the hash that _next started */
      printf("orphan "); put_hex(h1, 32); printf(" "); put_hex(h2, 32); printf(" ");
      put_hex(h3, 32); printf("\n");
    } else if (!strcmp(cmd, "commit")) {
      size_t k = unhex(x, a, sizeof a);
      unhex(y, b, sizeof b);
      randomx_calculate_commitment(a, k, b, h1);
      printf("commit "); put_hex(h1, 32); printf("\n");
    } else if (!strcmp(cmd, "items")) {
      if (!dataset) dataset = randomx_alloc_dataset(RANDOMX_FLAG_DEFAULT);
      if (!dataset) { fprintf(stderr, "randomx_alloc_dataset failed\n"); return 2; }
      unsigned long start = strtoul(x, NULL, 10), count = strtoul(y, NULL, 10);
      randomx_init_dataset(dataset, cache, start, count);
      const uint64_t *w = (const uint64_t *)randomx_get_dataset_memory(dataset);
      printf("items");
      for (unsigned long i = start * 8; i < (start + count) * 8; i++)
        printf(" %016llx", (unsigned long long)w[i]);
      printf("\n");
    } else if (!strcmp(cmd, "rounding")) {
      randomx_vm *vm = vm_named(x);
      size_t k = unhex(y, a, sizeof a);
      fesetround(FE_UPWARD);
      randomx_calculate_hash(vm, a, k, h1);
      int kept = fegetround() == FE_UPWARD;
      fesetround(FE_TONEAREST);
      printf("rounding "); put_hex(h1, 32); printf(" %d\n", kept);
    } else if (!strcmp(cmd, "nulls")) {
      nulls();
    } else {
      fprintf(stderr, "unknown command %s\n", cmd);
      return 2;
    }
    fflush(stdout);
  }
  for (int i = 0; i < 4; i++)
    if (vms[i]) randomx_destroy_vm(vms[i]);
  if (dataset) randomx_release_dataset(dataset);
  randomx_release_cache(cache);
  return 0;
}
