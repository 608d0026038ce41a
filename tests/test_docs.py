"""Every code block of ``README.md``, ``docs/your-own-tools.md`` and ``docs/data.md`` runs, so
the docs cannot drift from the code.

A document's fenced blocks are read in order and each one is accounted for:

- a block whose first line is ``# NAME.py`` or ``# NAME.toml`` is that file, written into the
  document's working directory (``# NAME.py, continued`` appends to it); a Python file is
  compiled and a TOML file loaded as a policy when written, and later blocks use them;
- a ``python`` block without a file name runs in the document's interpreter: one fresh
  process per document, its blocks in order, top-level ``await`` allowed, as in
  ``python -m asyncio`` (which the guide tells its readers to use);
- a ``sh`` block runs with bash (``set -eo pipefail``) in the working directory, with
  ``.venv/bin`` first on ``PATH``, ``AIRLOCK_HOME`` in the temporary directory and nothing on
  stdin; its placeholders (``PREVIEW_ID``, ``FP``, ``RUN``...) are replaced first by values
  earlier blocks produced;
- a ``text`` block right after another block is what that block prints (``...`` matches
  anything; runs of whitespace compare equal);
- a block that cannot run in a test is in :data:`NOT_RUN`, by its exact text (trailing spaces
  aside), with the reason.

:func:`test_every_block_is_run_or_listed` fails for a block that is none of these, for a listed
block the documents no longer have, and when the number of blocks of any kind changes without
this file changing with it.
"""

from __future__ import annotations

import doctest
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, Literal

import pytest

from airlock.policies import load_policy
from tests.conftest import DATA_IMAGE, require_docker

REPO: Final = Path(__file__).resolve().parent.parent
README: Final = REPO / "README.md"
GUIDE: Final = REPO / "docs" / "your-own-tools.md"
DATA: Final = REPO / "docs" / "data.md"
DEPLOY: Final = REPO / "docs" / "deploy.md"
PERFORMANCE_LOG: Final = REPO / "docs" / "performance-log.md"
"""Earlier benchmark runs, in prose: no block to run."""
BIN: Final = REPO / ".venv" / "bin"
STEP_TIMEOUT: Final = 120.0

# -- what cannot run, by exact text ----------------------------------------------------------

_PERFORMANCE = "a recorded benchmark result (make bench measures it anew; figures vary by machine)"

NOT_RUN: Final[dict[Path, dict[str, str]]] = {
    README: {
        """\
make demo   # the main job: installs what it needs, then runs the demo end to end
make test   # lint (ruff), types (mypy --strict), and every test, Docker ones included""": (
            "installs packages and the engine; the demo runs in tests/examples/billing/"
            "test_demo.py and CI runs make test itself"
        ),
        """\
model proposal ──► Harness ──┬─ execute_code(code) ─► Sandbox (container, no network)
                             │                          └─ tools.x(...) ─► Bridge ─► Registry ─► read tool
                             ├─ direct read ──────────────────────────────────► Registry ─► read tool
                             └─ direct write ─► Registry: prepare ─► preview ─► approval ─► commit once ─► receipt""": (
            "a diagram"
        ),
        """\
.venv/bin/python -m examples.billing &          # the example's service on 127.0.0.1:8400
export BILLING_TOKEN_ACME=tok_...              # a host secret: never in a container or a result""": (
            "leaves a service running and needs the token it prints; the test starts the same "
            "command itself (billing_service below) and exports every tenant's token"
        ),
        """\
sustained runs/s (6 s per case, in 2 rounds)
case                                    runs    runs/s    p50 ms    p99 ms  ratio
docker run --rm, 8 conc.                  43       5.6    1291.1    2215.2  1.00x docker run --rm, 8 conc.
docker run --rm --runtime crun, 8 c.      50       6.3    1114.3    1740.1  1.13x docker run --rm, 8 conc.
new principal/run, pool 0                 68       9.5     745.6    1343.2  1.70x docker run --rm, 8 conc.
new principal/run, pool 4                 66       8.7     911.0    1743.7  1.56x docker run --rm, 8 conc.
new principal/run, pool 0, crun           77      10.6     709.4    1158.8  1.90x docker run --rm, 8 conc.
new principal/run, pool 4, crun           81      10.8     856.6    1372.6  1.93x docker run --rm, 8 conc.
reuse, 1 principals                     1111     185.0       5.1      11.1  33.12x docker run --rm, 8 conc.
reuse, 2 principals                     1789     297.9       6.3      16.3  53.31x docker run --rm, 8 conc.
reuse, 8 principals                     1690     280.4      27.4      64.5  50.19x docker run --rm, 8 conc.
reuse, 32 principals                    1566     254.8     126.7     211.6  45.60x docker run --rm, 8 conc.""": _PERFORMANCE,
        """\
warm run, one at a time (request -> result)
case                                       n       median ms        p99 ms  ratio
pooled fresh container                    50           3.562         8.197
reused container, back to back           300           6.063         8.669  1.70x pooled fresh container
reused, 20 ms apart (ready again)        300           1.492         2.553  0.42x pooled fresh container

the machine after a pause: a run's first step alone
case                                       n       median us        p99 us  ratio
a ToolSession built 20 ms after a run    300         109.951       183.124  2.03x the same, built right after
the same, built right after              300          54.067        95.569""": _PERFORMANCE,
        """\
request -> first instruction, 50 runs each (ms)
case                                       n       median ms        p99 ms  ratio
runc base cold                            50         101.297       127.429
runc base warm                            50           0.320         4.154
runc data cold                            50         586.163       648.090  5.79x runc base cold
runc data warm                            50           0.490        13.332  1.53x runc base warm
crun base cold                            50          99.801       119.027  0.99x runc base cold
crun base warm                            50           0.455         5.236  1.42x runc base warm
crun data cold                            50         594.635       618.725  5.96x crun base cold
crun data warm                            50           0.593         5.745  1.30x crun base warm
runsc base cold                           50         373.324       437.014  3.69x runc base cold
runsc base warm                           50           2.147        17.126  6.71x runc base warm
runsc data cold                           50        2357.215      2483.036  6.31x runsc base cold
runsc data warm                           50           2.335        17.029  1.09x runsc base warm

request -> result, 50 runs each (ms)
case                                       n       median ms        p99 ms  ratio
runc base cold                            50         102.219       128.465
runc base warm                            50           2.520         9.112
runc data cold                            50         587.743       649.612  5.75x runc base cold
runc data warm                            50           6.357        65.579  2.52x runc base warm
crun base cold                            50         101.130       119.971  0.99x runc base cold
crun base warm                            50           3.832        11.097  1.52x runc base warm
crun data cold                            50         596.306       620.300  5.90x crun base cold
crun data warm                            50           6.405        13.714  1.67x crun base warm
runsc base cold                           50         381.276       441.117  3.73x runc base cold
runsc base warm                           50          10.575        42.031  4.20x runc base warm
runsc data cold                           50        2363.505      2490.406  6.20x runsc base cold
runsc data warm                           50          12.967        43.165  1.23x runsc base warm

tool call round trip, 500 sequential calls (us)
case                                       n       median us        p99 us  ratio
runc guest -> host -> guest              500          59.965      1306.510
crun guest -> host -> guest              500          60.040      1106.116  1.00x runc guest -> host -> guest
runsc guest -> host -> guest             500         294.830      1785.977  4.92x runc guest -> host -> guest

a data run given an input, request -> result, 50 runs each (ms)
case                                       n       median ms        p99 ms  ratio
runc data warm, no inputs                 50           6.357        65.579
runc data, inputs: own container          50         607.589       700.637  95.58x runc data warm, no inputs
runc data, inputs: pooled with them       50           5.360        19.932  0.84x runc data warm, no inputs
crun data warm, no inputs                 50           6.405        13.714
crun data, inputs: own container          50         601.612       660.374  93.93x crun data warm, no inputs
crun data, inputs: pooled with them       50           7.492        24.622  1.17x crun data warm, no inputs
runsc data warm, no inputs                50          12.967        43.165
runsc data, inputs: own container         50        2357.793      2568.098  181.82x runsc data warm, no inputs
runsc data, inputs: pooled with them      50          15.454        54.108  1.19x runsc data warm, no inputs

a fresh interpreter in the data image: import cost, 5 runs (ms)
case                                       n       median ms        p99 ms  ratio
runc import the data packages              5         544.253       566.677
crun import the data packages              5         528.365       537.972
runsc import the data packages             5        2112.691      2177.085

runc base: idle pooled container memory (cgroup): median 12.2 MiB over 2 containers
runc data: idle pooled container memory (cgroup): median 86.0 MiB over 2 containers
crun base: idle pooled container memory (cgroup): median 12.2 MiB over 2 containers
crun data: idle pooled container memory (cgroup): median 86.0 MiB over 2 containers
runsc base: idle pooled container memory (cgroup): median 27.4 MiB over 2 containers
runsc data: idle pooled container memory (cgroup): median 106.7 MiB over 2 containers
goals (runc): warm median <= 10 ms, p99 <= 50 ms; idle pooled container <= 32 MiB""": _PERFORMANCE,
        """\
50000 calls per row; audit rows stored: 52000
path                        median us    p99 us  overhead us   ratio    calls/s
-------------------------------------------------------------------------------
handler (no admission)           0.26      0.46         0.00     1.0  2,480,984
admission, checks off            9.34     27.48         9.09    36.5     85,868
admission, memory audit          9.65     27.37         9.40    37.7     71,414
admission, SQLite audit          9.92     46.97         9.67    38.8     30,599
runtime checks of declarations: +0.31 us a call at the median (goal <= 5 us)

one audit event with no call current, and the per-call check, 50000 each (us)
case                                       n       median us        p99 us  ratio
ignored event, no hook                   200           0.062         0.082
watched event, no hook                   200           0.078         0.204
ignored event, hook                      200           0.224         0.360  3.62x ignored event, no hook
watched event, hook                      200           0.269         0.415  3.44x watched event, no hook
per-call check, no connection            200           0.548         0.726
audit events per admitted call (100 calls, the event loop's start and stop included): 1.26""": _PERFORMANCE,
        """\
batch of 100 proposals from one program, approved once (5 rounds)
case                                            median/s     min/s     max/s
direct writes one by one (baseline)                 52.0      28.9      69.0
previews proposed from one program                 125.9     112.6     162.3
batch items committed                              124.6      42.5     129.2
batch commits vs direct writes: 2.39x
refunds held by the service: 1000 (1000 expected), duplicates: 0""": _PERFORMANCE,
        """\
bridge round trip, 2000 sequential calls (us)
case                                       n       median us        p99 us  ratio
guest -> host -> guest                  2000         162.354      1337.700  4.38x host Registry.call (floor)
host Registry.call (floor)              2000          37.090       118.793
asyncio echo, 2 host processes          2000          32.471        55.534

1,000 reads of a ~227-byte record, 5 runs each, interleaved (ms; ratio of times, lower is faster)
case                                       n       median ms        p99 ms  ratio
sequential (loop of single calls)          5         267.796       285.023
1 concurrent .aio (bounded gather)         5         247.770       299.165  0.93x sequential (loop of single calls)
4 concurrent .aio (bounded gather)         5         134.685       155.594  0.50x sequential (loop of single calls)
16 concurrent .aio (bounded gather)        5          88.920        98.764  0.33x sequential (loop of single calls)
64 concurrent .aio (bounded gather)        5          73.220       115.778  0.27x sequential (loop of single calls)
1,000 at once (plain gather of .aio)       5          71.181        91.246  0.27x sequential (loop of single calls)
batched (one .batch of 1,000)              5          35.732        38.886  0.13x sequential (loop of single calls)
host Registry.call loop (floor)            1          50.687        50.687

case                                   calls/s at the median  x the loop
sequential (loop of single calls)                      3,734       1.00x
1 concurrent .aio (bounded gather)                     4,036       1.08x
4 concurrent .aio (bounded gather)                     7,425       1.99x
16 concurrent .aio (bounded gather)                   11,246       3.01x
64 concurrent .aio (bounded gather)                   13,657       3.66x
1,000 at once (plain gather of .aio)                  14,049       3.76x
batched (one .batch of 1,000)                         27,986       7.49x
host Registry.call loop (floor)                       19,729       5.28x

round trip median 162 us, p99 1338 us; audit events for the run: 37200 (every call admitted and recorded)
the machine's floor (asyncio echo, 2 host processes): 32 us at the median; the bridge's round trip is 5.00x it, 130 us more
host CPU per call over the run: 123 us (37200 calls; every thread of the host process: event loop, admission, audit writer; less noisy than time on a shared machine)
  of which event loop 88 us, audit writer 35 us (the writer's thread, if still alive at the end)
guest CPU per call over the run: 39 us (the program's process in the container: its own code and the guest side of the bridge)""": _PERFORMANCE,
        """\
writer thread CPU per stored event, 5 rounds (µs per event)
case                                       n       median µs        p99 µs  ratio
memory store, batches of 80 (floor)        5           0.623         0.671
SQLite, batches of 1                       5         293.619       315.281  471.52x memory store, batches of 80 (floor)
SQLite, batches of 80                      5          22.964        23.468  36.88x memory store, batches of 80 (floor)
SQLite, batches of 500                     5          18.481        19.129  29.68x memory store, batches of 80 (floor)
SQLite, batches of 80, 100,000 before      5          36.731        37.179  58.99x memory store, batches of 80 (floor)
PostgreSQL, batches of 80                  5          20.126        22.766  32.32x memory store, batches of 80 (floor)
  memory store, batches of 80 (floor)   mean batch    80.0 events
  SQLite, batches of 1                  mean batch     1.0 events
  SQLite, batches of 80                 mean batch    80.0 events
  SQLite, batches of 500                mean batch   500.0 events
  SQLite, batches of 80, 100,000 before mean batch    80.0 events
  PostgreSQL, batches of 80             mean batch    80.0 events
64 durable calls at a time, 2,048 calls, 5 rounds (µs)
case                                       n       median µs        p99 µs  ratio
writer CPU per stored event                5          34.015        34.193
process CPU per call                       5          63.466        65.897
  mean batch 38.4 events""": _PERFORMANCE,
        """\
one write (prepare + approve(policy) + commit) by ledger, 1000 writes per case
case                                       n       median ms        p99 ms  ratio
memory                                  1000           1.164         1.694
  prepare+approve, memory               1000           0.559         0.798
  commit, memory                        1000           0.595         0.884
disk NORMAL                             1000           1.339         6.130  1.15x memory
  prepare+approve, disk NORMAL          1000           0.632         4.761
  commit, disk NORMAL                   1000           0.692         4.011
disk FULL                               1000           2.332         3.666  2.00x memory
  prepare+approve, disk FULL            1000           1.114         2.282
  commit, disk FULL                     1000           1.195         2.195

throughput (one writer, sequential)
ledger memory                            842 writes/s
ledger disk NORMAL                       645 writes/s
ledger disk FULL                         418 writes/s""": _PERFORMANCE,
        """\
one write (prepare + approve(policy) + commit), ledger by database, 300 writes per process
case                                       n       median ms        p99 ms  ratio
sqlite FULL, 1 process                   300           3.077        25.631
postgresql, 1 process                    300           8.132       116.478  2.64x sqlite FULL, 1 process
sqlite FULL, 4 processes                1200           4.909       329.294  1.60x sqlite FULL, 1 process
postgresql, 4 processes                 1200          28.519        98.890  9.27x sqlite FULL, 1 process

throughput, all processes together
sqlite FULL, 1 process                       217 writes/s  1.00x sqlite FULL, 1 process
postgresql, 1 process                         71 writes/s  0.33x sqlite FULL, 1 process
sqlite FULL, 4 processes                     176 writes/s  0.81x sqlite FULL, 1 process
postgresql, 4 processes                      115 writes/s  0.53x sqlite FULL, 1 process""": _PERFORMANCE,
        """\
longest record() of each 1,024 calls on the event loop, 20,000 calls (ms)
case                                       n       median ms        p99 ms  ratio
memory store (floor)                      20           0.027         0.074
SQLite, inline every 1,024 (before)       20          17.807        25.609  1773.53x SQLite, writer thread (now)
SQLite, writer thread (now)               20           0.010         2.348

how late a 1 ms sleep on the same loop woke (ms)
case                                       n       median ms        p99 ms  ratio
memory store (floor)                     278           1.407         2.237
SQLite, inline every 1,024 (before)      268           1.340        24.547  0.91x SQLite, writer thread (now)
SQLite, writer thread (now)              330           1.476         8.171
  memory store (floor)                     29,845 calls/s  longest record()   0.07 ms  probe woke >5 ms late 1 of 278 times
  SQLite, inline every 1,024 (before)      19,996 calls/s  longest record()  25.61 ms  probe woke >5 ms late 19 of 268 times
  SQLite, writer thread (now)              17,911 calls/s  longest record()   2.35 ms  probe woke >5 ms late 20 of 330 times

a call that waits until its events are durable (ms per call)
case                                       n       median ms        p99 ms  ratio
durable call, 1 at a time               2048           0.515         2.686
durable call, 8 at a time               2048           1.341         4.789  2.61x durable call, 1 at a time
durable call, 64 at a time              2048           5.063         8.716  9.84x durable call, 1 at a time
  durable call, 1 at a time: 1.0 calls per transaction, 1,646 calls/s
  durable call, 8 at a time: 4.1 calls per transaction, 5,268 calls/s
  durable call, 64 at a time: 32.0 calls per transaction, 12,146 calls/s

audit queries at 100,000 events (43 MiB on disk, written in 2.9 s), 5 runs each (ms)
case                                       n       median ms        p99 ms  ratio
baseline: effects, empty log               5         641.492       673.227
audit effects --since 1h                   5         581.920       678.434  0.91x baseline: effects, empty log
audit find --resource inv_1* --since 7d     5         530.366       547.838  0.83x baseline: effects, empty log
audit find --caller code --effect w,n      5         728.178       790.440  1.14x baseline: effects, empty log
audit list                                 5         558.015       838.572  0.87x baseline: effects, empty log
full scan (what --since did), in process     1        1208.663      1208.663  1.88x baseline: effects, empty log
audit verify (whole chain), in process     1        1147.225      1147.225  1.79x baseline: effects, empty log
peak memory of each command (MiB)
  baseline: effects, empty log                    62.6
  audit effects --since 1h                        62.8
  audit find --resource inv_1* --since 7d         64.1
  audit find --caller code --effect w,n           60.6
  audit list                                      58.3
  verify: 100,000 records, ok=True

audit queries at 1,000,000 events (429 MiB on disk, written in 33.8 s), 5 runs each (ms)
case                                       n       median ms        p99 ms  ratio
baseline: effects, empty log               5         641.492       673.227
audit effects --since 1h                   5         582.112       825.434  0.91x baseline: effects, empty log
audit find --resource inv_1* --since 7d     5         815.849       913.061  1.27x baseline: effects, empty log
audit find --caller code --effect w,n      5         579.325       591.272  0.90x baseline: effects, empty log
audit list                                 5         776.451       878.944  1.21x baseline: effects, empty log
full scan (what --since did), in process     1       11029.542     11029.542  17.19x baseline: effects, empty log
audit verify (whole chain), in process     1       17008.770     17008.770  26.51x baseline: effects, empty log
peak memory of each command (MiB)
  baseline: effects, empty log                    62.6
  audit effects --since 1h                        64.3
  audit find --resource inv_1* --since 7d        111.2
  audit find --caller code --effect w,n           76.1
  audit list                                      58.3
  verify: 1,000,000 records, ok=True

goals: effects --since 1h and find at 10^6 events <= 1000 ms and <= 200 MiB""": _PERFORMANCE,
        """\
bytes into the model's context: 200 invoices, find the duplicates
case                                   calls    result bytes    call bytes     total
execute_code                               1             216           530       746
direct calls                             201          46,167        20,489    66,656
reduction through execute_code: 99.5% of result bytes, 98.9% of all bytes (goal >= 90%)
duplicates found by the program: [['inv_006', 'inv_007'], ['inv_031', 'inv_032'], ['inv_056', 'inv_057'], ['inv_081', 'inv_082'], ['inv_106', 'inv_107'], ['inv_131', 'inv_132'], ['inv_156', 'inv_157'], ['inv_181', 'inv_182']]""": _PERFORMANCE,
        """\
make lint types pytest        # the parts of make test
make soak                     # the long runs: the bridge fuzzer, the data image under gVisor
make bench                    # the benchmarks
UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/bridge/test_render_api.py   # refresh the API snapshot
AIRLOCK_UPDATE_GOLDEN=1 .venv/bin/pytest tests/airlock tests/examples  # refresh inventory goldens""": (
            "runs the whole suite, the long runs and the benchmarks, or rewrites snapshots and goldens"
        ),
    },
    GUIDE: {
        """\
import anthropic

client = anthropic.AsyncAnthropic()
messages = [{"role": "user", "content": "Which meeting notes record a decision?"}]
while True:
    response = await client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=2048,
        messages=messages,
        tools=render_tools(session.tools(), "anthropic"),
    )
    messages.append({"role": "assistant", "content": response.content})
    if response.stop_reason != "tool_use":
        break
    messages.append({"role": "user", "content": await handle_turn(session, response.content)})

print(response.content[-1].text)""": (
            "needs the anthropic SDK (not a dependency) and a live API key; handle_turn's "
            "acceptance of SDK objects is tested in tests/airlock/frontends/test_providers.py"
        ),
    },
    DATA: {
        """\
make image-data
.venv/bin/airlock doctor --image data     # isolation checks, and the packages' versions""": (
            "builds the image (make test builds it before the tests); the data image's "
            "isolation runs in tests/sandbox/test_isolation.py and doctor's package check in "
            "tests/airlock/cli/test_data_cli.py"
        ),
        """\
.venv/bin/airlock serve --mcp --registry myapp:registry --policy data_policy.toml \\
    --user analyst --inputs ./exports --keep-state""": (
            "serves until an MCP client disconnects, over an application's registry; the "
            "options are tested in tests/airlock/cli/test_data_cli.py, artifacts as MCP "
            "resources there too"
        ),
    },
    DEPLOY: {
        """\
pip install 'airlock[postgres]'
export AIRLOCK_DATABASE_URL=postgresql://airlock@db.internal:5432/airlock""": (
            "installs a package and names a database server that does not exist here; make test installs the extra, and the test sets the URL the next block reads to a throwaway server"
        ),
        """\
export AIRLOCK_DATABASE_URL='postgresql://airlock@db.internal/ops?options=-csearch_path%3Dairlock'""": (
            "names a database server that does not exist here; every PostgreSQL test uses a URL with search_path (tests/postgres.py, fresh_schema)"
        ),
        """\
apiVersion: v1
kind: Pod
metadata:
  generateName: airlock-run-
  labels: {app.kubernetes.io/name: airlock-sandbox, airlock/owner: harness-7f3c}
spec:
  runtimeClassName: gvisor              # RuntimeClass whose handler is runsc
  restartPolicy: Never
  activeDeadlineSeconds: 60             # the profile's wall-clock limit (the harness kills first)
  automountServiceAccountToken: false   # no credential of any kind enters the pod
  enableServiceLinks: false             # no service addresses in the environment
  hostNetwork: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 65534
    seccompProfile:
      type: Localhost
      localhostProfile: airlock/seccomp-<hash>.json   # rendered from policies/, as for Docker
  containers:
    - name: program
      image: registry.internal/airlock-sandbox@sha256:...   # pinned by digest
      command: ["python3", "-I", "-S", "/opt/airlock/airlock_runner.py"]
      env: []
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: ["ALL"]}
      resources:
        limits: {cpu: "1", memory: 512Mi, ephemeral-storage: 64Mi}
        requests: {cpu: 250m, memory: 512Mi}
      volumeMounts: [{name: tmp, mountPath: /tmp}]
  volumes:
    - name: tmp
      emptyDir: {medium: Memory, sizeLimit: 16Mi}""": (
            "a Kubernetes manifest on paper: no Kubernetes backend exists yet"
        ),
        """\
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: airlock-sandbox-deny-all, namespace: airlock-sandbox}
spec:
  podSelector: {matchLabels: {app.kubernetes.io/name: airlock-sandbox}}
  policyTypes: [Ingress, Egress]        # no rule of either kind: nothing in, nothing out""": (
            "Kubernetes manifests on paper: no Kubernetes backend exists yet"
        ),
    },
    PERFORMANCE_LOG: {},
}

# -- how many blocks of each kind: a change to the docs shows here ------------------------

Kind = Literal["file", "python", "sh", "output", "not_run"]

EXPECTED_KINDS: Final[dict[Path, dict[Kind, int]]] = {
    DATA: {"file": 3, "python": 3, "sh": 3, "output": 5, "not_run": 2},
    DEPLOY: {"file": 0, "python": 1, "sh": 0, "output": 1, "not_run": 4},
    PERFORMANCE_LOG: {"file": 0, "python": 0, "sh": 0, "output": 0, "not_run": 0},
    README: {"file": 4, "python": 0, "sh": 8, "output": 0, "not_run": 15},
    GUIDE: {"file": 7, "python": 17, "sh": 7, "output": 20, "not_run": 1},
}


# -- reading the documents -------------------------------------------------------------------

_OPEN = re.compile(r"^```([\w-]*)\s*$")
_CLOSE = re.compile(r"^```\s*$")
_FILE = re.compile(r"^# (?P<name>[\w.-]+\.(?:py|toml))(?P<continued>, continued)?(?::.*)?$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: its info string, its text and the line it starts on."""

    doc: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def extract(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, in order."""
    blocks: list[Block] = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    start: int | None = None
    lang = ""
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        if start is None:
            opened = _OPEN.match(line)
            if opened:
                start, lang, body = number, opened.group(1), []
        elif _CLOSE.match(line):
            blocks.append(Block(doc, start, lang, "\n".join(body)))
            start = None
        else:
            body.append(line)
    assert start is None, f"{doc.name}:{start}: a fenced block is never closed"
    return blocks


def _normalized(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@dataclass(frozen=True, slots=True)
class Step:
    """What the test does with one block."""

    kind: Kind
    block: Block
    reason: str = ""
    file: str | None = None
    appends: bool = False
    output: Block | None = None
    """The ``text`` block that shows what this one prints."""


def plan(doc: Path) -> list[Step]:
    """Every block of ``doc`` as a step; an output block is attached to the step before it.

    Fails the test for a block that is neither runnable nor listed (a ``text`` block that
    follows no runnable block is such a block).
    """
    listed = {_normalized(text): reason for text, reason in NOT_RUN[doc].items()}
    steps: list[Step] = []
    for block in extract(doc):
        text = _normalized(block.text)
        first = text.splitlines()[0] if text else ""
        named = _FILE.match(first)
        if text in listed:
            steps.append(Step("not_run", block, reason=listed[text]))
        elif block.lang == "text" and steps and steps[-1].kind in ("file", "python", "sh"):
            previous = steps[-1]
            assert previous.output is None, f"{block.where}: two output blocks for one block"
            steps[-1] = Step(
                previous.kind,
                previous.block,
                file=previous.file,
                appends=previous.appends,
                output=block,
            )
            steps.append(Step("output", block))
        elif block.lang in ("python", "toml") and named:
            steps.append(Step("file", block, file=named["name"], appends=bool(named["continued"])))
        elif block.lang == "python":
            steps.append(Step("python", block))
        elif block.lang == "sh":
            steps.append(Step("sh", block))
        else:
            pytest.fail(
                f"{block.where}: a {block.lang or 'plain'!r} block the test neither runs nor "
                "lists; run it (python, sh, a file, the output of the block before) or add "
                "it to NOT_RUN with the reason"
            )
    return steps


# -- the accounting (no Docker needed) -------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [README, GUIDE, DATA, DEPLOY, PERFORMANCE_LOG],
    ids=["README", "guide", "data", "deploy", "performance log"],
)
def test_every_block_is_run_or_listed(doc: Path) -> None:
    steps = plan(doc)
    counts = {kind: sum(1 for s in steps if s.kind == kind) for kind in EXPECTED_KINDS[doc]}
    assert counts == EXPECTED_KINDS[doc], "the documents changed: check the new blocks run"
    assert len(steps) == len(extract(doc)) == sum(EXPECTED_KINDS[doc].values())
    present = {_normalized(s.block.text) for s in steps}
    stale = [text[:60] for text in NOT_RUN[doc] if _normalized(text) not in present]
    assert not stale, f"NOT_RUN lists blocks {doc.name} no longer has: {stale}"
    for step in steps:
        if step.kind == "file" and step.appends:
            earlier = [s.file for s in steps[: steps.index(step)] if s.kind == "file"]
            assert step.file in earlier, f"{step.block.where}: continues a file never begun"


def test_every_document_is_covered() -> None:
    # A new page under docs/ needs its entry in NOT_RUN and EXPECTED_KINDS, and a run test.
    assert sorted(REPO.glob("docs/**/*.md")) == [DATA, DEPLOY, PERFORMANCE_LOG, GUIDE]
    assert set(NOT_RUN) == set(EXPECTED_KINDS) == {README, GUIDE, DATA, DEPLOY, PERFORMANCE_LOG}


def test_extract_reads_fences_in_order_with_their_info_strings(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("text\n```sh\necho 1\n```\n\n```\nplain\n```\n```python\n# a.py\nx = 1\n```\n")
    blocks = extract(doc)
    assert [(b.lang, b.text, b.line) for b in blocks] == [
        ("sh", "echo 1", 2),
        ("", "plain", 6),
        ("python", "# a.py\nx = 1", 9),
    ]


# -- running a document ----------------------------------------------------------------------

_DRIVER = r"""
import ast, asyncio, contextlib, io, json, sys, traceback

async def main():
    namespace = {"__name__": "__main__"}
    loop = asyncio.get_running_loop()
    reply = sys.stdout
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        request = json.loads(line)
        out, ok = io.StringIO(), True
        try:
            with contextlib.redirect_stdout(out):
                if request["kind"] == "exec":
                    code = compile(request["source"], request["name"], "exec",
                                   flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                    done = eval(code, namespace)
                    if asyncio.iscoroutine(done):
                        await done
                else:
                    print(eval(request["source"], namespace), end="")
        except BaseException:
            ok = False
            out.write(traceback.format_exc())
        reply.write(json.dumps({"ok": ok, "output": out.getvalue()}) + "\n")
        reply.flush()

asyncio.run(main())
"""


def _lines_of(stream: IO[str], into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


class Interpreter:
    """One Python process that runs blocks in order in one namespace, on one event loop."""

    def __init__(self, cwd: Path, env: dict[str, str], log: Path) -> None:
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _DRIVER],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._answers: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(
            target=_lines_of, args=(self.process.stdout, self._answers), daemon=True
        ).start()
        self.log = log

    def _ask(self, kind: str, source: str, name: str) -> tuple[bool, str]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"kind": kind, "source": source, "name": name}))
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        try:
            line = self._answers.get(timeout=STEP_TIMEOUT)
        except queue.Empty:
            pytest.fail(f"{name}: no answer within {STEP_TIMEOUT:g} s; {self._stderr()}")
        if line is None:
            pytest.fail(f"{name}: the interpreter exited; {self._stderr()}")
        answer = json.loads(line)
        return bool(answer["ok"]), str(answer["output"])

    def run(self, block: Block) -> str:
        ok, output = self._ask("exec", block.text, f"<{block.where}>")
        assert ok, f"{block.where} failed:\n{output}\n{self._stderr()}"
        return output

    def value(self, expression: str) -> str:
        ok, output = self._ask("eval", expression, f"<{expression}>")
        assert ok, f"{expression!r} failed:\n{output}"
        return output

    def _stderr(self) -> str:
        self._log.flush()
        return "stderr:\n" + self.log.read_text()[-3000:]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


@dataclass(frozen=True, slots=True)
class Background:
    """A shell block that keeps running (a script waiting for an approval): started, read
    until every ``ready`` pattern matched (their named groups become placeholders), and
    required to exit 0 once the block after it ran."""

    ready: tuple[str, ...]


BACKGROUND: Final[dict[str, Background]] = {
    ".venv/bin/python example.py": Background(
        ready=(
            r"^run: (?P<RUN>run_\w+)$",
            r"^waiting for: airlock approvals approve (?P<PREVIEW_ID>pv_\w+) "
            r"--fingerprint (?P<FP>\w+)$",
        )
    ),
}

PLACEHOLDERS_FROM_PYTHON: Final[dict[Path, dict[str, str]]] = {
    README: {},
    GUIDE: {"PREVIEW_ID": 'pause["preview_id"]', "FINGERPRINT": 'pause["fingerprint"]'},
    DATA: {"RUN": "run_dir"},
    DEPLOY: {},
}
"""Placeholders of shell blocks whose values are Python expressions in the interpreter."""


@dataclass
class Running:
    """A background block's process and what it printed so far."""

    block: Block
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        assert self.process.stdout is not None
        threading.Thread(
            target=_lines_of, args=(self.process.stdout, self.reader), daemon=True
        ).start()

    def wait_ready(self, spec: Background) -> dict[str, str]:
        found: dict[str, str] = {}
        pending = [re.compile(p) for p in spec.ready]
        while pending:
            try:
                line = self.reader.get(timeout=STEP_TIMEOUT)
            except queue.Empty:
                pytest.fail(f"{self.block.where}: not ready in time:\n{''.join(self.lines)}")
            if line is None:
                pytest.fail(
                    f"{self.block.where} exited before it was ready:\n{''.join(self.lines)}"
                )
            self.lines.append(line)
            for pattern in list(pending):
                match = pattern.search(line.rstrip("\n"))
                if match:
                    found.update(match.groupdict())
                    pending.remove(pattern)
        return found

    def join(self) -> None:
        try:
            code = self.process.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            pytest.fail(f"{self.block.where} did not finish:\n{''.join(self.lines)}")
        while (line := self.reader.get(timeout=10)) is not None:
            self.lines.append(line)
        assert code == 0, f"{self.block.where} exited with {code}:\n{''.join(self.lines)}"


def check_output(step: Step, got: str) -> None:
    if step.output is None:
        return
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    want = step.output.text + "\n"
    assert checker.check_output(want, got, flags), (
        f"{step.block.where} printed what {step.output.where} does not show:\n"
        f"--- shown\n{want}--- printed\n{got}"
    )


class DocumentRun:
    """Runs the steps of one document in order in ``workdir``."""

    def __init__(self, doc: Path, workdir: Path, env: dict[str, str]) -> None:
        self.doc = doc
        self.workdir = workdir
        self.env = env
        self.python: Interpreter | None = None
        self.values: dict[str, str] = {}
        self.ran: list[Step] = []
        self._waiting: Running | None = None

    def run(self, steps: list[Step]) -> None:
        try:
            for step in steps:
                if step.kind in ("not_run", "output"):
                    continue
                self._run(step)
                self.ran.append(step)
                if self._waiting is not None and step.block is not self._waiting.block:
                    waiting, self._waiting = self._waiting, None
                    waiting.join()
        finally:
            if self.python is not None:
                self.python.close()
            if self._waiting is not None and self._waiting.process.poll() is None:
                os.killpg(self._waiting.process.pid, signal.SIGKILL)

    def _run(self, step: Step) -> None:
        if step.kind == "file":
            self._write(step)
        elif step.kind == "python":
            if self.python is None:
                self.python = Interpreter(self.workdir, self.env, self.workdir / "python.log")
            check_output(step, self.python.run(step.block))
        elif step.kind == "sh":
            self._shell(step)

    def _write(self, step: Step) -> None:
        assert step.file is not None
        path = self.workdir / step.file
        text = step.block.text + "\n"
        if step.appends:
            text = path.read_text() + "\n" + text
        path.write_text(text)
        if path.suffix == ".py":
            compile(path.read_text(), str(path), "exec")
        else:
            load_policy(path)  # a policy shown in the docs is a valid one

    def _shell(self, step: Step) -> None:
        script = self._substitute(step.block)
        spec = BACKGROUND.get(_normalized(step.block.text))
        command = ["bash", "-c", "set -eo pipefail\n" + script]
        if spec is not None:
            process = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self._waiting = Running(step.block, process)
            self.values.update(self._waiting.wait_ready(spec))
            return
        try:
            done = subprocess.run(
                command,
                cwd=self.workdir,
                env=self.env,
                input="",
                capture_output=True,
                text=True,
                timeout=STEP_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{step.block.where} ran past {STEP_TIMEOUT:g} s: {exc.stdout!r}")
        assert done.returncode == 0, (
            f"{step.block.where} exited with {done.returncode}:\n{script}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
        check_output(step, done.stdout)

    def _substitute(self, block: Block) -> str:
        text = block.text
        for name, expression in PLACEHOLDERS_FROM_PYTHON[self.doc].items():
            if re.search(rf"\b{name}\b", text):
                assert self.python is not None, f"{block.where}: {name} before any Python ran"
                self.values[name] = self.python.value(expression)
        for name, value in self.values.items():
            text = re.sub(rf"\b{name}\b", value, text)
        return text


def _environment(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["AIRLOCK_HOME"] = str(tmp_path / "home")
    env["PYTHONUNBUFFERED"] = "1"  # a background script's lines arrive as it prints them
    return env


@contextmanager
def billing_service(workdir: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The README's ``python -m examples.billing`` on a free port, for as long as the block
    runs; yields ``BILLING_URL`` (where ``examples.billing:demo_registry`` then reaches it, as
    the README says to do when its port 8400 is taken) and ``BILLING_TOKEN_<TENANT>`` for
    every tenant. A free port, so a process holding 8400 (the README's own service, say) or
    another run of this test does not stand in its way."""
    process = subprocess.Popen(
        [str(BIN / "python"), "-m", "examples.billing", "--port", "0"],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        try:
            started = json.loads(first)
        except json.JSONDecodeError:
            process.wait(timeout=10)
            rest = process.stdout.read()
            pytest.fail(f"the billing service did not start: {first}{rest}")
        yield {"BILLING_URL": started["base_url"]} | {
            f"BILLING_TOKEN_{tenant.upper()}": token for tenant, token in started["tokens"].items()
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _runnable(steps: list[Step]) -> int:
    return sum(1 for s in steps if s.kind in ("file", "python", "sh"))


@pytest.mark.docker
def test_readme_blocks_run(tmp_path: Path) -> None:
    require_docker()
    steps = plan(README)
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    # The README's commands run from the repository's root: .venv and examples are there.
    (workdir / ".venv").symlink_to(REPO / ".venv")
    (workdir / "examples").symlink_to(REPO / "examples")
    env = _environment(tmp_path)
    with billing_service(workdir, env) as tokens:
        env.update(tokens)
        run = DocumentRun(README, workdir, env)
        run.run(steps)
    assert len(run.ran) == _runnable(steps) > 0
    assert set(run.values) == {"RUN", "PREVIEW_ID", "FP"}
    assert (workdir / "effects.lock").exists()


@pytest.mark.docker
def test_guide_blocks_run(tmp_path: Path) -> None:
    require_docker()
    steps = plan(GUIDE)
    workdir = tmp_path / "notes"
    workdir.mkdir()
    run = DocumentRun(GUIDE, workdir, _environment(tmp_path))
    run.run(steps)
    assert len(run.ran) == _runnable(steps) > 0
    assert set(run.values) == {"PREVIEW_ID", "FINGERPRINT"}
    assert sorted(p.name for p in workdir.iterdir() if p.suffix in (".py", ".toml")) == [
        "find_decisions.py",
        "notes.py",
        "notes_policy.toml",
        "web.py",
        "web_policy.toml",
        "wider.toml",
    ]


@pytest.mark.docker
def test_data_blocks_run(tmp_path: Path) -> None:
    require_docker(DATA_IMAGE)
    steps = plan(DATA)
    workdir = tmp_path / "analysis"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(REPO / ".venv")  # the page's commands run from a checkout
    run = DocumentRun(DATA, workdir, _environment(tmp_path))
    run.run(steps)
    assert len(run.ran) == _runnable(steps) > 0
    assert set(run.values) == {"RUN"}
    assert sorted(p.name for p in (workdir / "out").iterdir()) == ["totals.csv", "totals.png"]


def test_deploy_blocks_run(tmp_path: Path, postgres_url: str) -> None:
    # The page's Python opens both stores from AIRLOCK_DATABASE_URL: a throwaway server here.
    from tests.postgres import fresh_schema

    steps = plan(DEPLOY)
    env = _environment(tmp_path)
    env["AIRLOCK_DATABASE_URL"] = fresh_schema(postgres_url, "deploy")
    run = DocumentRun(DEPLOY, tmp_path, env)
    run.run(steps)
    assert len(run.ran) == _runnable(steps) > 0
    assert (tmp_path / "home" / "audit.key").exists()
