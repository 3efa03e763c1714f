// Times anyshape's product kernel (python/anyshape/iree/kernels/linear_rows.c)
// on roberta-base's products: per layer Q, K, V and the output projection (k
// = n = 768), the feed-forward up (768 -> 3072) and down (3072 -> 768), every
// layer's weights of their own, so that they stream from memory as in the
// model. The kernel is the object a module links (run.py builds it with the
// module's flags and links it here); the workgroups are split as the module's
// dispatch splits them (linear_rows.py's executable_text) and taken by
// `threads` workers in turn, as IREE's task system takes them.
//
// With format q8 or q4 the weights are int8 or int4 (groups of 32) in the
// quantized entry points' layout (quantized_panels.h), their values
// arbitrary (the time does not depend on them), for the float32 kernel's
// figures side by side with the quantized ones'; q4i8 is int4 with up to 4
// rows rounded to int8 and multiplied in integers (the _q4i8 entry points),
// q8i16 int8 with them rounded to int16 (_q8i16).
//
// usage: products <f32|q8|q4|q4i8|q8i16> <threads> <layers> <rounds> <rows>... [-- K:N...]
// prints, per row count: format, rows, threads, the median and the fastest round in ms.
// After "--", a layer's products are the (k, n) given (a model other than
// roberta-base; a "K:N" prefixed with "1x" is taken once, after the layers,
// as an LM head is).

#define _POSIX_C_SOURCE 200809L  // clock_gettime

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void anyshape_linear_rows(const float* x, size_t x_offset, const float* packed,
                          size_t packed_offset, const float* bias, size_t bias_offset,
                          float* y, size_t y_offset, size_t m, size_t n, size_t k,
                          size_t gx, size_t nx, size_t gy, size_t ny);

void anyshape_linear_rows_q8(const float* x, size_t x_offset, const float* q,
                             size_t q_offset, const float* scales, size_t scales_offset,
                             const float* bias, size_t bias_offset, float* y,
                             size_t y_offset, size_t m, size_t n, size_t k, size_t gx,
                             size_t nx, size_t gy, size_t ny);
void anyshape_linear_rows_q4(const float* x, size_t x_offset, const float* q,
                             size_t q_offset, const float* scales, size_t scales_offset,
                             const float* bias, size_t bias_offset, float* y,
                             size_t y_offset, size_t m, size_t n, size_t k, size_t group,
                             size_t gx, size_t nx, size_t gy, size_t ny);
void anyshape_linear_rows_q4i8(const float* x, size_t x_offset, const float* q,
                               size_t q_offset, const float* scales, size_t scales_offset,
                               const float* bias, size_t bias_offset, float* y,
                               size_t y_offset, size_t m, size_t n, size_t k, size_t group,
                               size_t gx, size_t nx, size_t gy, size_t ny);
void anyshape_linear_rows_q8i16(const float* x, size_t x_offset, const float* q,
                                size_t q_offset, const float* scales, size_t scales_offset,
                                const float* bias, size_t bias_offset, float* y,
                                size_t y_offset, size_t m, size_t n, size_t k, size_t gx,
                                size_t nx, size_t gy, size_t ny);

// linear_rows.py's PANEL, ROWS_PER_WORKGROUP, PANELS_PER_WORKGROUP,
// BALANCE_WORKGROUPS, TILE_ROWS.
enum { PANEL = 16, ROWS_PER_WG = 192, PANELS_PER_WG = 8, BALANCE_WGS = 4, TILE_ROWS = 12,
       GROUP = 32 };
enum format { F32, Q8, Q4, Q4I8, Q8I16, FORMATS };
static const char* const names[] = {"f32", "q8", "q4", "q4i8", "q8i16"};

typedef struct {
  size_t k, n;
  float *packed, *bias, *scales;
} product_t;

static enum format format;

static product_t* products;
static size_t count, rows, threads;
static float *x, *y;  // rows x the widest k or n, each product's input and output
static atomic_size_t* next;  // per product: its next workgroup
// The workers meet after each product as IREE's workers do between two
// dispatches: spinning, not asleep (a futex barrier costs tens of us a
// product, as much as a small product's weights take to stream).
static atomic_size_t arrived, generation;

static void barrier_wait(void) {
  const size_t seen = atomic_load(&generation);
  if (atomic_fetch_add(&arrived, 1) + 1 == threads) {
    atomic_store(&arrived, 0);
    atomic_fetch_add(&generation, 1);
    return;
  }
  while (atomic_load(&generation) == seen) __builtin_ia32_pause();
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// The dispatch's workgroup count (x: runs of panels, y: runs of rows).
static void grid(const product_t* p, size_t* nx, size_t* ny) {
  const size_t panels = ceil_div(p->n, PANEL), balanced = BALANCE_WGS * threads;
  const size_t fewest = panels < balanced ? panels : balanced;  // a decode step's runs
  size_t runs = ceil_div(rows, ROWS_PER_WG), tiles = ceil_div(rows, TILE_ROWS);
  *nx = ceil_div(panels, PANELS_PER_WG);
  if (tiles <= 1 && *nx < fewest) *nx = fewest;
  size_t for_workers = ceil_div(threads, *nx > 0 ? *nx : 1);
  size_t spread = tiles < for_workers ? tiles : for_workers;
  *ny = runs > spread ? runs : spread;
}

static void* worker(void* arg) {
  (void)arg;
  for (size_t i = 0; i < count; ++i) {
    const product_t* p = &products[i];
    size_t nx, ny;
    grid(p, &nx, &ny);
    for (size_t g; (g = atomic_fetch_add(&next[i], 1)) < nx * ny;)
      if (format == Q8)
        anyshape_linear_rows_q8(x, 0, p->packed, 0, p->scales, 0, p->bias, 0, y, 0, rows,
                                p->n, p->k, g % nx, nx, g / nx, ny);
      else if (format == Q4)
        anyshape_linear_rows_q4(x, 0, p->packed, 0, p->scales, 0, p->bias, 0, y, 0, rows,
                                p->n, p->k, GROUP, g % nx, nx, g / nx, ny);
      else if (format == Q8I16)
        anyshape_linear_rows_q8i16(x, 0, p->packed, 0, p->scales, 0, p->bias, 0, y, 0, rows,
                                   p->n, p->k, g % nx, nx, g / nx, ny);
      else if (format == Q4I8)
        anyshape_linear_rows_q4i8(x, 0, p->packed, 0, p->scales, 0, p->bias, 0, y, 0, rows,
                                  p->n, p->k, GROUP, g % nx, nx, g / nx, ny);
      else
        anyshape_linear_rows(x, 0, p->packed, 0, p->bias, 0, y, 0, rows, p->n, p->k, g % nx,
                             nx, g / nx, ny);
    barrier_wait();  // as the module's dispatches, one after the other
  }
  return NULL;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void* a, const void* b) {
  double d = *(const double*)a - *(const double*)b;
  return (d > 0) - (d < 0);
}

// n bytes of arbitrary int8 or int4 weights (as floats' storage, which the
// entry points take).
static float* bytes(size_t n) {
  unsigned char* p = aligned_alloc(64, ceil_div(n, 64) * 64);
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)((i * 2654435761u) >> 13);
  return (float*)p;
}

// n float16 scales of 1/64 (0x2400).
static float* halves(size_t n) {
  unsigned short* p = aligned_alloc(64, ceil_div(n * 2, 64) * 64);
  for (size_t i = 0; i < n; ++i) p[i] = 0x2400;
  return (float*)p;
}

static float* filled(size_t n) {
  float* p = aligned_alloc(64, ceil_div(n * sizeof(float), 64) * 64);
  for (size_t i = 0; i < n; ++i) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  return p;
}

int main(int argc, char** argv) {
  format = F32;
  while (argc >= 6 && format < FORMATS && strcmp(argv[1], names[format])) ++format;
  if (argc < 6 || format == FORMATS) {
    fprintf(stderr, "usage: %s <f32|q8|q4|q4i8|q8i16> <threads> <layers> <rounds> <rows>...\n",
            argv[0]);
    return 2;
  }
  ++argv;
  --argc;
  threads = strtoul(argv[1], 0, 10);
  size_t layers = strtoul(argv[2], 0, 10), rounds = strtoul(argv[3], 0, 10);
  // (k, n): each layer's products, then those taken once (heads)
  size_t shapes[32][2] = {{768, 768}, {768, 768}, {768, 768}, {768, 768},
                          {768, 3072}, {3072, 768}};
  size_t heads[32][2];
  size_t per_layer = 6, once = 0, widest = 3072;
  int last_rows = argc;
  for (int a = 4; a < argc; ++a)
    if (!strcmp(argv[a], "--")) {
      last_rows = a;
      per_layer = 0;
      for (int s = a + 1; s < argc; ++s) {
        const int head = !strncmp(argv[s], "1x", 2);
        if ((head ? once : per_layer) == 32) return 2;
        size_t* shape = head ? heads[once++] : shapes[per_layer++];
        if (sscanf(argv[s] + 2 * head, "%zu:%zu", &shape[0], &shape[1]) != 2) return 2;
        widest = shape[0] > widest ? shape[0] : widest;
        widest = shape[1] > widest ? shape[1] : widest;
      }
      break;
    }
  count = layers * per_layer + once;
  products = calloc(count, sizeof(product_t));
  for (size_t i = 0; i < count; ++i) {
    product_t* p = &products[i];
    const size_t* shape = i < layers * per_layer ? shapes[i % per_layer]
                                                 : heads[i - layers * per_layer];
    p->k = shape[0];
    p->n = shape[1];
    const size_t columns = ceil_div(p->n, PANEL) * PANEL;
    if (format == Q8 || format == Q8I16) {
      p->packed = bytes(columns * p->k);
      p->scales = filled(columns);
    } else if (format == Q4 || format == Q4I8) {
      p->packed = bytes(columns * p->k / 2);
      p->scales = halves(columns * p->k / GROUP);
    } else {
      p->packed = filled(columns * p->k);
    }
    p->bias = filled(p->n);
  }
  next = calloc(count, sizeof(atomic_size_t));
  double* times = calloc(rounds, sizeof(double));
  pthread_t* pool = calloc(threads, sizeof(pthread_t));
  for (int a = 4; a < last_rows; ++a) {
    rows = strtoul(argv[a], 0, 10);
    x = filled(rows * widest);
    y = filled(rows * widest);
    for (size_t r = 0; r <= rounds; ++r) {  // round 0 warms up
      for (size_t i = 0; i < count; ++i) atomic_store(&next[i], 0);
      double start = now_ms();
      for (size_t t = 1; t < threads; ++t) pthread_create(&pool[t], NULL, worker, NULL);
      worker(NULL);
      for (size_t t = 1; t < threads; ++t) pthread_join(pool[t], NULL);
      if (r > 0) times[r - 1] = now_ms() - start;
    }
    qsort(times, rounds, sizeof(double), by_value);
    printf("%s rows %zu threads %zu: %.2f ms median, %.2f fastest (%zu rounds of %zu products)\n",
           names[format], rows, threads, times[rounds / 2], times[0], rounds, count);
    fflush(stdout);
    free(x);
    free(y);
  }
  return 0;
}
