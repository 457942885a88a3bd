#!/usr/bin/env python3
"""How fast this host copies a 2.3 GiB file into the page cache, one writer against the
parallel ways of filling one file (pwrite from threads, memcpy into a shared mapping) and
against several files at once: the ceiling of writing one sorted Parquet output
(docs/performance.md, sessions 27 and 28).

  python3 benches/page_cache_probe.py [DIR]     # needs numpy; writes and removes files in DIR

The last cases put the file on the disk (fsync, or O_DIRECT): the ceiling of an output
that is flushed before it is renamed into place (session 28).
"""
import os, sys, time, threading, mmap
import numpy as np
D = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
SIZE = 2304 << 20
BLOCK = 8 << 20
src = np.random.randint(0, 255, size=SIZE, dtype=np.uint8)
def fresh(name):
    p = os.path.join(D, name)
    if os.path.exists(p): os.remove(p)
    return p
def report(what, t0, p):
    t = time.perf_counter() - t0
    print(f"{what}: {t:.3f} s, {SIZE/t/1e9:.2f} GB/s", flush=True)
    os.remove(p)
# 1. one thread, write() of 8 MiB blocks
p = fresh("pc1"); fd = os.open(p, os.O_WRONLY | os.O_CREAT)
t0 = time.perf_counter()
mv = memoryview(src)
for off in range(0, SIZE, BLOCK): os.write(fd, mv[off:off+BLOCK])
os.close(fd); report("write, 1 thread, 8 MiB", t0, p)
# 1b. 1 MiB blocks
p = fresh("pc1b"); fd = os.open(p, os.O_WRONLY | os.O_CREAT)
t0 = time.perf_counter()
for off in range(0, SIZE, 1 << 20): os.write(fd, mv[off:off+(1<<20)])
os.close(fd); report("write, 1 thread, 1 MiB", t0, p)
# 2. N threads pwrite disjoint ranges of one file
for n in (4, 8, 16):
    p = fresh("pc2"); fd = os.open(p, os.O_WRONLY | os.O_CREAT)
    def w(i):
        for off in range(i * BLOCK, SIZE, n * BLOCK): os.pwrite(fd, mv[off:off+BLOCK], off)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=w, args=(i,)) for i in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    os.close(fd); report(f"pwrite, {n} threads, one file", t0, p)
# 3. N threads memcpy into a shared mapping (ftruncate first; fallocate variant)
for n, falloc in ((8, False), (16, False), (8, True), (16, True)):
    p = fresh("pc3"); fd = os.open(p, os.O_RDWR | os.O_CREAT)
    t0 = time.perf_counter()
    if falloc: os.posix_fallocate(fd, 0, SIZE)
    else: os.ftruncate(fd, SIZE)
    m = np.memmap(p, dtype=np.uint8, mode="r+", shape=(SIZE,))
    def c(i):
        for off in range(i * BLOCK, SIZE, n * BLOCK): m[off:off+BLOCK] = src[off:off+BLOCK]
    ts = [threading.Thread(target=c, args=(i,)) for i in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    del m; os.close(fd); report(f"mmap memcpy, {n} threads, {'fallocate' if falloc else 'ftruncate'}", t0, p)
# 4. N files, one thread each (what a directory output could do)
for n in (4, 8):
    ps = [fresh(f"pc4-{i}") for i in range(n)]
    part = SIZE // n
    def f(i):
        fd = os.open(ps[i], os.O_WRONLY | os.O_CREAT)
        for off in range(i * part, (i + 1) * part, BLOCK): os.write(fd, mv[off:min(off+BLOCK, (i+1)*part)])
        os.close(fd)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=f, args=(i,)) for i in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    t = time.perf_counter() - t0
    print(f"write, {n} files in parallel: {t:.3f} s, {SIZE/t/1e9:.2f} GB/s", flush=True)
    [os.remove(q) for q in ps]
# 5. What the disk takes: buffered writes then fsync, and O_DIRECT writes (aligned
#    page-aligned buffers from mmap), 1 and 8 threads, one file.
def to_disk(direct, threads, chunk=32 << 20):
    p = fresh("pc5")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | (os.O_DIRECT if direct else 0))
    bufs = [mmap.mmap(-1, chunk) for _ in range(threads)]
    for i, b in enumerate(bufs): b.write(src[i * chunk:(i + 1) * chunk].tobytes())
    blocks = SIZE // chunk
    nxt = iter(range(blocks)); lock = threading.Lock()
    def w(i):
        while True:
            with lock: k = next(nxt, None)
            if k is None: return
            os.pwrite(fd, bufs[i], k * chunk)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=w, args=(i,)) for i in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    os.fsync(fd); os.close(fd)
    report(f"{'O_DIRECT' if direct else 'buffered + fsync'}, {threads} threads", t0, p)
for direct in (False, True):
    for threads in (1, 8):
        to_disk(direct, threads)
