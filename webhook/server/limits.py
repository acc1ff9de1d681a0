"""The serving limits' defaults, stdlib-only so ``gpuguard serve --help`` can show them without loading the server."""

from __future__ import annotations

# The apiserver writes a whole review at once; 10 s covers a 3 MiB body on a slow link, and a
# client that takes longer to send its request line, headers and body is dropped.
DEFAULT_READ_TIMEOUT = 10.0
# Each apiserver keeps a small pool of keep-alive connections; a thousand is far above any
# real cluster's need and well below what exhausts the process's file descriptors.
DEFAULT_MAX_CONNECTIONS = 1000
# One client address may hold at most this many of them, so a client that opens connections and
# keeps them idle can't take the whole cap: three quarters stay for the apiservers (each opens one
# connection per admission call in flight, far fewer than this even under load).
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 250
# Engine threads per worker: reviews are judged off the event loop, so health probes and other
# reviews are answered while a large one is judged.  The GIL runs one at a time; more threads
# only let more slow reviews run side by side before a new one queues (bench/hostile.py).
ENGINE_THREADS = 4
# How often a thread holding the GIL hands it over (Python's default is 5 ms): shorter lets the
# event loop answer probes and small reviews between an engine thread's slices (bench/hostile.py).
GIL_SWITCH_SECONDS = 0.001
# Fair queuing per requester (user or ServiceAccount, in a namespace; ``fairness``): reviews of one requester
# judged at a time, and how many (and how many body bytes) may wait before the next is refused (429).  One at a
# time leaves the other engine threads to other requesters: the GIL shares the CPU between the threads that run,
# so a flood holding more of them slows everyone's review (bench/fairness.py).
DEFAULT_REQUESTER_CONCURRENCY = 1
DEFAULT_REQUESTER_QUEUE = 32
DEFAULT_REQUESTER_QUEUE_BYTES = 24 * 1024 * 1024
