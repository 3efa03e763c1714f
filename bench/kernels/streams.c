// How fast one core (or `threads`) reads the product kernel's weights in the
// order its tiles read them: a tile of one panel reads a workgroup's panels
// as one stream (they are contiguous), a tile of two panels reads two
// streams `panel` bytes apart that start again at every tile. Not a test:
// it prints GB/s for docs/quantized-weights.md ("One panel a tile").
//
// usage: streams <threads> <panel bytes>...
// prints, per panel size: GB/s read as one stream and as two panels side by
// side, the best of 9 passes over 256 MiB (more than any L3 here).

#define _POSIX_C_SOURCE 200809L  // clock_gettime

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES ((size_t)256 << 20)

static unsigned char* weights;
static size_t panel, threads;
static int side_by_side;
static volatile long long sink;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// Each 64-byte line is read whole (two 32-byte loads) and folded into a sum,
// so that the loads cannot be dropped.
__attribute__((target("avx2"))) static void* read_share(void* arg) {
  const size_t t = (size_t)arg, share = BYTES / threads / (2 * panel) * (2 * panel);
  const unsigned char* w = weights + t * share;
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  for (size_t tile = 0; tile < share; tile += 2 * panel) {
    const unsigned char* first = w + tile;
    const unsigned char* second = side_by_side ? first + panel : first + 64;
    const size_t step = side_by_side ? 64 : 128, end = side_by_side ? panel : 2 * panel;
    for (size_t i = 0; i < end; i += step) {
      a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i*)(first + i)));
      a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i*)(first + i + 32)));
      b = _mm256_xor_si256(b, _mm256_loadu_si256((const __m256i*)(second + i)));
      b = _mm256_xor_si256(b, _mm256_loadu_si256((const __m256i*)(second + i + 32)));
    }
  }
  long long out[4];
  _mm256_storeu_si256((__m256i*)out, _mm256_xor_si256(a, b));
  sink += out[0];
  return NULL;
}

static double best_rate(void) {
  pthread_t pool[64];
  double best = 1e30;
  for (int pass = 0; pass < 9; ++pass) {
    const double start = now_s();
    for (size_t t = 1; t < threads; ++t) pthread_create(&pool[t], NULL, read_share, (void*)t);
    read_share(0);
    for (size_t t = 1; t < threads; ++t) pthread_join(pool[t], NULL);
    const double took = now_s() - start;
    best = took < best ? took : best;
  }
  return BYTES / best / 1e9;
}

int main(int argc, char** argv) {
  if (argc < 3 || (threads = strtoul(argv[1], 0, 10)) < 1 || threads > 64) {
    fprintf(stderr, "usage: %s <threads> <panel bytes>...\n", argv[0]);
    return 2;
  }
  weights = aligned_alloc(64, BYTES);
  memset(weights, 1, BYTES);
  for (int a = 2; a < argc; ++a) {
    panel = strtoul(argv[a], 0, 10) / 64 * 64;
    if (panel == 0) return 2;
    side_by_side = 0;
    const double one = best_rate();
    side_by_side = 1;
    const double two = best_rate();
    printf("threads %zu, panels of %zu bytes: one stream %.1f GB/s, two panels side by side %.1f GB/s\n",
           threads, panel, one, two);
    fflush(stdout);
  }
  return 0;
}
