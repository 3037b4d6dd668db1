// tinyplug GPU emulator runtime: runs a compiled kernel with GPU launch semantics on the host.
// Each work-group runs on one host thread; each work-item is a fiber (ucontext) when the kernel has barriers, and
// a barrier switches to the next fiber. Work-items run in forward, reverse or shuffled order between barriers.
// Faults inside a kernel never reach the host: SIGFPE from an integer division is completed in place (the quotient
// gets all bits set, the remainder the dividend, as a GPU gives some value and carries on), SIGSEGV on a guard page
// is reported as an out-of-bounds access, any other SIGSEGV as a wild access; the launch stops with an error record.
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define TP_RUNTIME_VERSION 2
enum { ORDER_FORWARD = 0, ORDER_REVERSE = 1, ORDER_SHUFFLE = 2 };
enum { ERR_NONE = 0, ERR_DIVERGENCE = 1, ERR_BARRIER_SITES = 2, ERR_OOB = 3, ERR_SEGV = 4, ERR_FPE = 5,
       ERR_STACK = 6, ERR_NO_FIBERS = 7, ERR_ALLOC = 8, ERR_KERNEL = 9 };
enum { FIBER_READY = 0, FIBER_AT_BARRIER = 1, FIBER_DONE = 2 };

typedef void (*tp_entry_fn)(void **args, int32_t *vars);

typedef struct {   // one kernel argument buffer, for the bounds report (guard pages are set up by tp_alloc_guarded)
  uintptr_t base, nbytes, itemsize, lo, hi;   // [lo, hi): the mapping with its guard pages
} tp_buffer;

typedef struct {   // what went wrong; filled by the first failing work-item
  int32_t code, buffer, is_store, count_barrier, count_done, pad;
  int64_t index;
  uint64_t address;
  int32_t group[3], local[3], other_local[3];
} tp_error;

typedef struct {
  tp_entry_fn entry;
  void **args;
  int32_t *vars;
  uint32_t groups[3], local[3];
  int32_t order, fibers, serial_groups;
  uint64_t seed;
  const tp_buffer *buffers;
  int32_t nbuffers;
  uint64_t stack_bytes;
  atomic_long next_group;
  atomic_int failed;
  pthread_mutex_t error_lock;
  tp_error *error;
} tp_launch;

typedef struct {
#if defined(__x86_64__)
  void *sp;          // saved stack pointer of a suspended fiber (tp_switch)
#else
  ucontext_t ctx;
#endif
  int state;
  void *site;
} tp_fiber;

typedef struct {   // per host thread
  tp_launch *launch;
  uint32_t group[3], local[3];
  int in_kernel, cur;
  tp_fiber *fibers;
  int nfibers_alloc;
  char *stacks;
  size_t stack_bytes, stacks_len;
#if defined(__x86_64__)
  void *sched_sp;
#else
  ucontext_t sched;
#endif
  sigjmp_buf recover;
  void *altstack;
} tp_thread;

static __thread tp_thread T;

// ---------------- work-item queries (called by the dialect's builtins) ----------------
uint64_t tp_local_id(uint32_t d) { return d < 3 ? T.local[d] : 0; }
uint64_t tp_group_id(uint32_t d) { return d < 3 ? T.group[d] : 0; }
uint64_t tp_local_size(uint32_t d) { return d < 3 ? T.launch->local[d] : 1; }
uint64_t tp_num_groups(uint32_t d) { return d < 3 ? T.launch->groups[d] : 1; }
uint64_t tp_global_id(uint32_t d) { return d < 3 ? (uint64_t)T.group[d] * T.launch->local[d] + T.local[d] : 0; }
uint64_t tp_global_size(uint32_t d) { return d < 3 ? (uint64_t)T.launch->groups[d] * T.launch->local[d] : 1; }
uint32_t tp_work_dim(void) { return T.launch->groups[2] * T.launch->local[2] > 1 ? 3 :
                                   T.launch->groups[1] * T.launch->local[1] > 1 ? 2 : 1; }

static void set_local(uint32_t k) {
  const uint32_t *l = T.launch->local;
  T.local[0] = k % l[0]; T.local[1] = (k / l[0]) % l[1]; T.local[2] = k / (l[0] * l[1]);
}

static void report(int code, int64_t index, int buffer, int is_store, uint64_t address) {
  tp_launch *L = T.launch;
  pthread_mutex_lock(&L->error_lock);
  if (!atomic_load(&L->failed)) {
    tp_error *e = L->error;
    e->code = code; e->index = index; e->buffer = buffer; e->is_store = is_store; e->address = address;
    for (int d = 0; d < 3; d++) { e->group[d] = (int32_t)T.group[d]; e->local[d] = (int32_t)T.local[d]; }
    atomic_store(&L->failed, 1);
  }
  pthread_mutex_unlock(&L->error_lock);
}

// A device function of a dialect's prelude found the kernel doing something the hardware does not define (a race with
// an asynchronous operation, a bad operand): it stops the launch with a message, as a fault would.
static char kernel_message[512];
void tp_kernel_error(const char *message) {
  pthread_mutex_lock(&T.launch->error_lock);
  if (!atomic_load(&T.launch->failed)) snprintf(kernel_message, sizeof kernel_message, "%s", message);
  pthread_mutex_unlock(&T.launch->error_lock);
  report(ERR_KERNEL, 0, -1, 0, 0);
  siglongjmp(T.recover, 1);
}
const char *tp_kernel_message(void) { return kernel_message; }

// A number that changes with every launch: a prelude that keeps per-work-item state across calls (queued cp.async
// copies, pending wgmmas) drops what a previous launch left (one stopped by an error leaves its queues full).
static atomic_ulong launch_serial;
uint64_t tp_launch_serial(void) { return (uint64_t)atomic_load(&launch_serial); }

// ---------------- switching between fibers ----------------
#if defined(__x86_64__)
// Save the callee-saved registers and the SSE/x87 control words on this stack, store the stack pointer in *from,
// continue on `to` (a stack saved the same way). No system call: swapcontext's signal-mask syscalls cost microseconds.
__attribute__((naked, noinline)) static void tp_switch(void **from, void *to) {
  __asm__ volatile(
    "pushq %rbp\n pushq %rbx\n pushq %r12\n pushq %r13\n pushq %r14\n pushq %r15\n"
    "subq $8, %rsp\n stmxcsr (%rsp)\n fnstcw 4(%rsp)\n"
    "movq %rsp, (%rdi)\n movq %rsi, %rsp\n"
    "ldmxcsr (%rsp)\n fldcw 4(%rsp)\n addq $8, %rsp\n"
    "popq %r15\n popq %r14\n popq %r13\n popq %r12\n popq %rbx\n popq %rbp\n ret\n");
}
#endif

static void fiber_main(void);
static void to_scheduler(tp_fiber *f) {
#if defined(__x86_64__)
  tp_switch(&f->sp, T.sched_sp);
#else
  swapcontext(&f->ctx, &T.sched);
#endif
}
static void to_fiber(tp_fiber *f) {
#if defined(__x86_64__)
  tp_switch(&T.sched_sp, f->sp);
#else
  swapcontext(&T.sched, &f->ctx);
#endif
}
static void start_fiber(tp_fiber *f, char *stack, size_t size) {
#if defined(__x86_64__)
  uint64_t *top = (uint64_t *)(((uintptr_t)(stack + size) & ~(uintptr_t)15) - 16);
  top[0] = (uint64_t)(uintptr_t)fiber_main;   // tp_switch's `ret` lands here, with the stack as after a call
  top[1] = 0;
  uint64_t *sp = top - 7;                      // six registers and the control words
  memset(sp, 0, 7 * sizeof(uint64_t));
  sp[0] = 0x1F80 | ((uint64_t)0x037F << 32);   // default MXCSR, default x87 control word
  f->sp = sp;
#else
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = stack;
  f->ctx.uc_stack.ss_size = size;
  f->ctx.uc_link = &T.sched;
  makecontext(&f->ctx, fiber_main, 0);
#endif
}

void tp_barrier(void) {
  if (!T.in_kernel) return;
  if (T.fibers == NULL || !T.launch->fibers) { report(ERR_NO_FIBERS, 0, -1, 0, 0); siglongjmp(T.recover, 1); }
  tp_fiber *f = &T.fibers[T.cur];
  f->state = FIBER_AT_BARRIER;
  f->site = __builtin_return_address(0);
  to_scheduler(f);
}

// ---------------- fault handling ----------------
static struct sigaction old_segv, old_fpe, old_bus;

// Length of the ModRM operand bytes after the opcode (x86-64, no 16-bit addressing).
static int modrm_length(const uint8_t *p) {
  uint8_t modrm = p[0], mod = modrm >> 6, rm = modrm & 7;
  int n = 1;
  if (mod != 3 && rm == 4) { uint8_t sib = p[1]; n++; if (mod == 0 && (sib & 7) == 5) n += 4; }
  if (mod == 0 && rm == 5) n += 4;       // rip-relative
  else if (mod == 1) n += 1;
  else if (mod == 2) n += 4;
  return n;
}

// Complete a trapping `div`/`idiv` as a GPU would (no trap): quotient all ones, remainder the dividend's low part.
static int skip_division(ucontext_t *uc) {
#if defined(__x86_64__)
  greg_t *g = uc->uc_mcontext.gregs;
  const uint8_t *p = (const uint8_t *)g[REG_RIP];
  int len = 0, opsize = 4, rexw = 0;
  for (;; p++, len++) {   // prefixes
    if (*p == 0x66) opsize = 2;
    else if ((*p & 0xF0) == 0x40) rexw = (*p & 8) != 0;
    else if (*p == 0xF2 || *p == 0xF3 || *p == 0x2E || *p == 0x3E) {}
    else break;
  }
  if (rexw) opsize = 8;
  if (*p != 0xF6 && *p != 0xF7) return 0;
  int reg = (p[1] >> 3) & 7;
  if (reg != 6 && reg != 7) return 0;
  if (*p == 0xF6) opsize = 1;
  len += 1 + modrm_length(p + 1);
  uint64_t rax = (uint64_t)g[REG_RAX];
  if (opsize == 1) g[REG_RAX] = (greg_t)((rax & ~0xFFFFull) | ((rax & 0xFF) << 8) | 0xFF);
  else if (opsize == 2) {
    g[REG_RDX] = (greg_t)(((uint64_t)g[REG_RDX] & ~0xFFFFull) | (rax & 0xFFFF));
    g[REG_RAX] = (greg_t)(rax | 0xFFFF);
  } else if (opsize == 4) { g[REG_RDX] = (greg_t)(rax & 0xFFFFFFFFull); g[REG_RAX] = (greg_t)0xFFFFFFFFull; }
  else { g[REG_RDX] = (greg_t)rax; g[REG_RAX] = (greg_t)-1; }
  g[REG_RIP] += len;
  return 1;
#else
  (void)uc; return 0;
#endif
}

static void chain(int sig, siginfo_t *info, void *ctx, struct sigaction *old) {
  if (old->sa_flags & SA_SIGINFO) { if (old->sa_sigaction) { old->sa_sigaction(sig, info, ctx); return; } }
  else if (old->sa_handler != SIG_IGN && old->sa_handler != SIG_DFL) { old->sa_handler(sig); return; }
  sigaction(sig, old, NULL);   // default action: re-raised when the instruction runs again
}

static void on_fault(int sig, siginfo_t *info, void *ctx) {
  if (!T.in_kernel) { chain(sig, info, ctx, sig == SIGFPE ? &old_fpe : sig == SIGBUS ? &old_bus : &old_segv); return; }
  if (sig == SIGFPE) {
    if (skip_division((ucontext_t *)ctx)) return;
    report(ERR_FPE, 0, -1, 0, (uint64_t)(uintptr_t)info->si_addr);
    siglongjmp(T.recover, 1);
  }
  uintptr_t addr = (uintptr_t)info->si_addr;
  int is_store = 0;
#if defined(__x86_64__)
  is_store = (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
  tp_launch *L = T.launch;
  for (int i = 0; i < L->nbuffers; i++) {
    const tp_buffer *b = &L->buffers[i];
    if (b->hi && addr >= b->lo && addr < b->hi) {
      intptr_t off = (intptr_t)addr - (intptr_t)b->base;
      int64_t index = off >= 0 ? off / (intptr_t)b->itemsize : -((-off + (intptr_t)b->itemsize - 1) / (intptr_t)b->itemsize);
      report(ERR_OOB, index, i, is_store, addr);
      siglongjmp(T.recover, 1);
    }
  }
  if (T.stacks && addr >= (uintptr_t)T.stacks && addr < (uintptr_t)T.stacks + T.stacks_len) report(ERR_STACK, 0, -1, is_store, addr);
  else report(ERR_SEGV, 0, -1, is_store, addr);
  siglongjmp(T.recover, 1);
}

// Ours at every launch: a library loaded after the first one (an OpenCL runtime) may have put its own in place, and
// PoCL's SIGFPE handler skips a trapping division leaving the dividend as the quotient. The one found is chained to
// for faults outside kernels.
static void ensure_handlers(void) {
  static const int sigs[3] = {SIGSEGV, SIGBUS, SIGFPE};
  struct sigaction *olds[3] = {&old_segv, &old_bus, &old_fpe};
  struct sigaction sa, cur;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; i++) {
    if (sigaction(sigs[i], NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault) continue;
    sigaction(sigs[i], &sa, olds[i]);
  }
}

static void ensure_altstack(void) {
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return;
  size_t n = 1 << 16;
  T.altstack = malloc(n);
  stack_t ss = {.ss_sp = T.altstack, .ss_size = n, .ss_flags = 0};
  sigaltstack(&ss, NULL);
}

// ---------------- fibers ----------------
static int ensure_fibers(int n, size_t stack_bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  stack_bytes = (stack_bytes + page - 1) / page * page;
  if (n <= T.nfibers_alloc && stack_bytes == T.stack_bytes) return 1;
  if (T.stacks) munmap(T.stacks, T.stacks_len);
  free(T.fibers);
  size_t each = stack_bytes + page;   // a guard page below each stack catches an overflow
  T.stacks_len = each * (size_t)n;
  T.stacks = mmap(NULL, T.stacks_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  T.fibers = calloc((size_t)n, sizeof(tp_fiber));
  if (T.stacks == MAP_FAILED || !T.fibers) { T.stacks = NULL; T.nfibers_alloc = 0; return 0; }
  for (int i = 0; i < n; i++) mprotect(T.stacks + each * (size_t)i, page, PROT_NONE);
  T.nfibers_alloc = n; T.stack_bytes = stack_bytes;
  return 1;
}

static void fiber_main(void) {
  T.launch->entry(T.launch->args, T.launch->vars);
  tp_fiber *f = &T.fibers[T.cur];
  f->state = FIBER_DONE;
#if defined(__x86_64__)
  to_scheduler(f);                      // never resumed
  __builtin_unreachable();
#endif
}                                       // ucontext: returning resumes the scheduler through uc_link

static uint64_t next_random(uint64_t *s) {   // splitmix64
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void make_order(uint32_t *order, uint32_t n, int kind, uint64_t *rng) {
  for (uint32_t i = 0; i < n; i++) order[i] = kind == ORDER_REVERSE ? n - 1 - i : i;
  if (kind == ORDER_SHUFFLE)
    for (uint32_t i = n - 1; i > 0; i--) { uint32_t j = (uint32_t)(next_random(rng) % (i + 1)); uint32_t t = order[i]; order[i] = order[j]; order[j] = t; }
}

static void run_group(tp_launch *L, uint64_t linear, uint32_t *order) {
  T.group[0] = (uint32_t)(linear % L->groups[0]);
  T.group[1] = (uint32_t)((linear / L->groups[0]) % L->groups[1]);
  T.group[2] = (uint32_t)(linear / ((uint64_t)L->groups[0] * L->groups[1]));
  uint32_t n = L->local[0] * L->local[1] * L->local[2];
  uint64_t rng = L->seed ^ (linear * 0xD1B54A32D192ED03ull);
  make_order(order, n, L->order, &rng);
  if (!L->fibers) {
    for (uint32_t i = 0; i < n && !atomic_load(&L->failed); i++) { set_local(order[i]); L->entry(L->args, L->vars); }
    return;
  }
  size_t each = T.stack_bytes + (size_t)sysconf(_SC_PAGESIZE);
  for (uint32_t i = 0; i < n; i++) {
    tp_fiber *f = &T.fibers[i];
    start_fiber(f, T.stacks + each * i + (each - T.stack_bytes), T.stack_bytes);
    f->state = FIBER_READY; f->site = NULL;
  }
  for (;;) {
    for (uint32_t i = 0; i < n; i++) {
      uint32_t k = order[i];
      if (T.fibers[k].state != FIBER_READY) continue;
      T.cur = (int)k; set_local(k);
      to_fiber(&T.fibers[k]);
      if (atomic_load(&L->failed)) return;
    }
    uint32_t waiting = 0, done = 0, first_done = n, first_other = n;
    void *site = NULL;
    for (uint32_t k = 0; k < n; k++) {
      tp_fiber *f = &T.fibers[k];
      if (f->state == FIBER_DONE) { done++; if (first_done == n) first_done = k; continue; }
      waiting++;
      if (site == NULL) site = f->site;
      else if (f->site != site && first_other == n) first_other = k;
    }
    if (waiting == 0) return;
    if (done || first_other != n) {
      uint32_t k = done ? first_done : first_other;
      set_local(k);
      report(done ? ERR_DIVERGENCE : ERR_BARRIER_SITES, 0, -1, 0, 0);
      L->error->count_barrier = (int32_t)waiting; L->error->count_done = (int32_t)done;
      uint32_t w = 0;
      while (w < n && T.fibers[w].state == FIBER_DONE) w++;   // a work-item that did wait, for the message
      set_local(w < n ? w : 0);
      for (int d = 0; d < 3; d++) L->error->other_local[d] = (int32_t)T.local[d];
      return;
    }
    make_order(order, n, L->order, &rng);
    for (uint32_t k = 0; k < n; k++) T.fibers[k].state = FIBER_READY;
  }
}

static void run_groups(tp_launch *L) {
  uint64_t total = (uint64_t)L->groups[0] * L->groups[1] * L->groups[2];
  uint32_t n = L->local[0] * L->local[1] * L->local[2];
  uint32_t *order = malloc(sizeof(uint32_t) * n);
  ensure_altstack();
  T.launch = L;
  if (!order || (L->fibers && !ensure_fibers((int)n, L->stack_bytes))) {
    report(ERR_ALLOC, 0, -1, 0, 0); free(order); return;
  }
  if (sigsetjmp(T.recover, 0) == 0) {
    T.in_kernel = 1;
    for (;;) {
      long g = atomic_fetch_add(&L->next_group, 1);
      if ((uint64_t)g >= total || atomic_load(&L->failed)) break;
      run_group(L, (uint64_t)g, order);
    }
  }
  T.in_kernel = 0;
  free(order);
}

// ---------------- worker threads ----------------
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER, launch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;
static tp_launch *pool_job;
static long pool_generation;
static int pool_workers, pool_wanted, pool_pending;

static void *worker(void *arg) {
  long seen = 0;
  int index = (int)(intptr_t)arg;
  for (;;) {
    pthread_mutex_lock(&pool_lock);
    while (pool_generation == seen || index >= pool_wanted) {
      if (pool_generation != seen) seen = pool_generation;   // a launch that does not need this worker
      pthread_cond_wait(&pool_work, &pool_lock);
    }
    seen = pool_generation;
    tp_launch *L = pool_job;
    pthread_mutex_unlock(&pool_lock);
    run_groups(L);
    pthread_mutex_lock(&pool_lock);
    if (--pool_pending == 0) pthread_cond_signal(&pool_done);
    pthread_mutex_unlock(&pool_lock);
  }
  return NULL;
}

// Run one launch; returns 0 or an ERR_ code with `error` filled in. Thread-safe (launches are serialised).
int tp_launch_kernel(tp_entry_fn entry, void **args, int32_t *vars, const uint32_t *groups, const uint32_t *local,
                     int32_t order, uint64_t seed, int32_t fibers, int32_t threads, int32_t serial_groups,
                     const tp_buffer *buffers, int32_t nbuffers, uint64_t stack_bytes, tp_error *error) {
  ensure_handlers();
  tp_launch L;
  memset(&L, 0, sizeof L);
  L.entry = entry; L.args = args; L.vars = vars; L.order = order; L.seed = seed; L.fibers = fibers;
  for (int d = 0; d < 3; d++) { L.groups[d] = groups[d] ? groups[d] : 1; L.local[d] = local[d] ? local[d] : 1; }
  L.buffers = buffers; L.nbuffers = nbuffers; L.stack_bytes = stack_bytes; L.error = error;
  pthread_mutex_init(&L.error_lock, NULL);
  memset(error, 0, sizeof *error);
  uint64_t total = (uint64_t)L.groups[0] * L.groups[1] * L.groups[2];
  int helpers = serial_groups ? 0 : threads - 1;
  if ((uint64_t)helpers > total - 1) helpers = (int)(total - 1);
  pthread_mutex_lock(&launch_lock);
  atomic_fetch_add(&launch_serial, 1);
  if (helpers > 0) {
    pthread_mutex_lock(&pool_lock);
    while (pool_workers < helpers) {
      pthread_t t;
      if (pthread_create(&t, NULL, worker, (void *)(intptr_t)pool_workers) != 0) break;
      pthread_detach(t);
      pool_workers++;
    }
    if (helpers > pool_workers) helpers = pool_workers;
    pool_job = &L; pool_wanted = helpers; pool_pending = helpers; pool_generation++;
    pthread_cond_broadcast(&pool_work);
    pthread_mutex_unlock(&pool_lock);
  }
  run_groups(&L);
  if (helpers > 0) {
    pthread_mutex_lock(&pool_lock);
    while (pool_pending > 0) pthread_cond_wait(&pool_done, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
  }
  pthread_mutex_unlock(&launch_lock);
  pthread_mutex_destroy(&L.error_lock);
  return error->code;
}

// ---------------- guarded buffers (bounds checking) ----------------
// nbytes of memory with an inaccessible page on each side; `at_end` puts the data against the upper guard (an
// access past the end faults at once), otherwise against the lower guard (an access before the start faults).
void *tp_alloc_guarded(uint64_t nbytes, int32_t at_end, uint64_t *lo, uint64_t *hi) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t body = (nbytes + page - 1) / page * page;
  if (body == 0) body = page;
  size_t len = body + 2 * page;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  mprotect(m, page, PROT_NONE);
  mprotect(m + page + body, page, PROT_NONE);
  *lo = (uint64_t)(uintptr_t)m; *hi = (uint64_t)(uintptr_t)(m + len);
  return at_end ? m + page + body - nbytes : m + page;
}

void tp_free_guarded(uint64_t lo, uint64_t hi) { munmap((void *)(uintptr_t)lo, (size_t)(hi - lo)); }

int32_t tp_runtime_version(void) { return TP_RUNTIME_VERSION; }
