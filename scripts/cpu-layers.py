#!/usr/bin/env python3
"""Where the CPU of a benchmark goes, by layer (docs/performance.md, "Where
the CPU of one job goes").

    go tool pprof -traces server.test cpu.out | scripts/cpu-layers.py [N]

Reads `go tool pprof -traces` on stdin and gives each sample to one layer:
the first frame from the leaf that names one (runtime, syscall and poller
frames are given to their caller, so a write's system call is the HTTP
layer's and an fdatasync the log's fsync), and to one side by its goroutine's
stack: the daemon (net/http's server, the handlers, the service, Pebble), the
clients (api.Client, net/http's transport, the benchmark's workers),
background GC. With N, the number of jobs the profile ran, it prints CPU
time per job as well."""
import re, sys
from collections import defaultdict

def secs(v):
    m = re.match(r'([\d.]+)(ns|us|µs|ms|s)', v)
    n, u = float(m.group(1)), m.group(2)
    return n * {'ns': 1e-9, 'us': 1e-6, 'µs': 1e-6, 'ms': 1e-3, 's': 1}[u]

def side(stack):
    s = ' '.join(stack)
    if re.search(r'server_test\.|api\.\(\*Client\)|api\.\(\*clientSession\)|persistConn|http2clientConnReadLoop|http2ClientConn|http2clientStream|net/http\.\(\*Transport\)|api\.\(\*h2cTransport\)', s):
        return 'clients'
    if re.search(r'net/http\.\(\*conn\)\.serve|http2serverConn|http2Server|leaselog/server\.|net/http\.\(\*response\)', s):
        return 'daemon'
    if re.search(r'pebble|leaselog/eventlog|leaselog/lease\.', s):
        return 'daemon'
    if re.search(r'runtime\.gcBgMarkWorker|runtime\.bgsweep|runtime\.bgscavenge', s):
        return 'gc'
    return 'other'

RULES = [  # leaf first: the first frame that matches names the layer
    ('fsync wait', r'Fdatasync|SyncData|\.Fsync'),
    ('JSON', r'^encoding/json|^github.com/go-json-experiment/json|leaselog/server\.(checkJSON|checkTokens|dupFrame|jsonType)|^unicode/utf8'),
    ('logging', r'zerolog'),
    ('metrics', r'prometheus'),
    ('log / Pebble', r'pebble|leaselog/eventlog|leaselog/projection|leaselog/event\.'),
    ('service / lease', r'leaselog/lease\.'),
    ('session framing', r'leaselog/server\.\(\*serverSession\)|leaselog/api\.\(\*clientSession\)|leaselog/api\.(Append|Parse)(Request|Answer)'),
    ('auth / routing / handler', r'leaselog/server\.|net/http\.\(\*ServeMux\)|^net/url|^path\.'),
    ('client (api.Client, the benchmark)', r'leaselog/api\.|server_test\.'),
    ('HTTP / net', r'^net/http|^net\.|^bufio|^net/textproto|golang.org/x/net|^crypto|^io\.|^context\.'),
]

def layer(stack):
    for fr in stack:
        f = fr.split()[0]
        if f.startswith(('runtime.', 'internal/runtime/', 'syscall.', 'internal/poll.', 'golang.org/x/sys/unix.Syscall', 'golang.org/x/sys/unix.syscall')):
            continue
        for name, rx in RULES:
            if re.search(rx, f):
                return name
    s = ' '.join(stack)
    if 'gcBgMarkWorker' in s or 'bgsweep' in s:
        return 'GC (background)'
    if 'runtime.mcall' in s or 'schedule' in s or 'findRunnable' in s:
        return 'scheduler'
    return 'runtime, other'

text = sys.stdin.read()
blocks = text.split('-----------+-------------------------------------------------------')
tot = defaultdict(float)
byside = defaultdict(lambda: defaultdict(float))
for b in blocks:
    lines = [l for l in b.strip('\n').split('\n') if l.strip()]
    while lines and not re.match(r'\s*[\d.]+(ns|us|µs|ms|s)\s', lines[0]):
        lines = lines[1:]  # labels (pebble: wal-sync)
    if not lines:
        continue
    first = lines[0].split()
    v = secs(first[0])
    stack = [first[1]] + [l.strip() for l in lines[1:]]
    stack = [s for s in stack if not s.startswith('bytes:')]
    lay, sd = layer(stack), side(stack)
    tot[lay] += v
    byside[sd][lay] += v
all_ = sum(tot.values())
n = int(sys.argv[1]) if len(sys.argv) > 1 else 0
print(f'total {all_:.2f}s' + (f', {1e6 * all_ / n:.0f} µs a job' if n else ''))
sides = ['daemon', 'clients', 'gc', 'other']
print('| layer | ' + ' | '.join(sides) + ' | all |')
print('| --- |' + ' --- |' * (len(sides) + 1))
for lay, v in sorted(tot.items(), key=lambda x: -x[1]):
    per = f' ({1e6 * v / n:.0f} µs a job)' if n else ''
    print(f'| {lay} | ' + ' | '.join(f'{100*byside[s][lay]/all_:.1f}%' for s in sides) + f' | {100*v/all_:.1f}%{per} |')
print('| all | ' + ' | '.join(f'{100*sum(byside[s].values())/all_:.1f}%' for s in sides) + ' | 100% |')
