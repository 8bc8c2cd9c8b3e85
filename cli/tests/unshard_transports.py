#!/usr/bin/env python3
"""`--unshard` and `--comm-groups` choose the transport and change no bit (docs/runtime.md):
`mfsdp verify` at W = 3 under each of broadcast, allgather_even and per_segment, and under
`--comm-groups model` (with either grouped unshard, tied embeddings, fast mode and deferred
accumulation), is bitwise equal to the oracle (fast mode: within its tolerance), and its counters
show the transport it ran (groups: one call a unit and direction with its parts beside it;
per_segment: a call a broadcast, no parts; model groups: one unshard call a forward and one
reduction call a step beside the non-finite flags' all-reduce, with the unit-grouped run's bytes).

unshard_transports.py MFSDP
"""
import json
import subprocess
import sys

MFSDP = sys.argv[1]
failures = []
unshard = {}


def verify(name, *flags):
    r = subprocess.run([MFSDP, "verify", "-w", "3", "--steps", "2", *flags, "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if r.returncode != 0:
        failures.append(f"{name}: exit {r.returncode}:\n{r.stdout[-1500:]}")
        return None
    return json.loads(r.stdout)  # exit 0: equal to the oracle (fast mode: within its tolerance)


reduce = {}
for transport in ("broadcast", "allgather_even", "per_segment"):
    v = verify(transport, "--unshard", transport)
    if v is None:
        continue
    if not v["bitwise_equal"]:
        failures.append(f"{transport}: not bitwise equal to the oracle")
    unshard[transport] = v["bytes"]["runtime"]["unshard"]
    reduce[transport] = v["bytes"]["runtime"]["grad_reduce"]
    print(f"  {transport:15} bitwise {v['bitwise_equal']}, unshard {unshard[transport]}")
for name, flags, bitwise in (("model", ["--comm-groups", "model"], True),
                             ("model allgather_even", ["--comm-groups", "model", "--unshard", "allgather_even"], True),
                             ("model tied", ["--comm-groups", "model", "--tie-embeddings"], True),
                             ("model deferred K3", ["--comm-groups", "model", "--grad-accum", "3", "--grad-reduce", "deferred"], True),
                             ("model fast", ["--comm-groups", "model", "--fast"], False)):
    v = verify(name, *flags)
    if v is None:
        continue
    if bitwise and not v["bitwise_equal"]:
        failures.append(f"{name}: not bitwise equal to the oracle")
    u, g = v["bytes"]["runtime"]["unshard"], v["bytes"]["runtime"]["grad_reduce"]
    print(f"  {name:22} bitwise {v['bitwise_equal']}, unshard {u}, grad_reduce {g}")
    micro_batches = v["grad_accum"]
    if u["calls"] != micro_batches:
        failures.append(f"{name}: {u['calls']} unshard calls in the step, expected {micro_batches} (one group a forward)")
    if g["calls"] != 2:
        failures.append(f"{name}: {g['calls']} gradient-reduction calls in the step, expected 2 (one group, the flags)")
    # Nothing resharded after forward, so nothing revived: half the unit-grouped unshard bytes (the
    # plain model lends nothing), and the same reduction bytes.
    if name == "model" and "broadcast" in unshard and (2 * u["bytes_recv"] != unshard["broadcast"]["bytes_recv"] or
                                                        g["bytes_sent"] != reduce["broadcast"]["bytes_sent"]):
        failures.append(f"{name}: moved other bytes than the unit-grouped run without its revives ({u}, {g} against "
                        f"{unshard['broadcast']}, {reduce['broadcast']})")
if len(unshard) == 3:
    g, a, p = unshard["broadcast"], unshard["allgather_even"], unshard["per_segment"]
    if not (g["parts"] > g["calls"] and a["parts"] > a["calls"]):
        failures.append("the grouped transports counted no group (parts <= calls)")
    if not (p["parts"] == 0 and p["calls"] > g["calls"]):
        failures.append("per_segment did not issue a collective per broadcast")
    if len({g["bytes_recv"], p["bytes_recv"]}) != 1:
        failures.append("broadcast and per_segment moved different bytes")
for f in failures:
    print("  FAIL " + f)
print("unshard_transports: " + ("all passed" if not failures else f"{len(failures)} failed"))
sys.exit(1 if failures else 0)
