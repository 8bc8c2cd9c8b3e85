#!/usr/bin/env python3
"""`--unshard` chooses the transport and changes no bit (docs/runtime.md): `mfsdp verify` at W = 3
under each of broadcast, allgather_even and per_segment is bitwise equal to the oracle, and its
counters show the transport it ran (groups: one call a unit and direction with its parts beside
it; per_segment: a call a broadcast, no parts).

unshard_transports.py MFSDP
"""
import json
import subprocess
import sys

MFSDP = sys.argv[1]
failures = []
unshard = {}
for transport in ("broadcast", "allgather_even", "per_segment"):
    r = subprocess.run([MFSDP, "verify", "-w", "3", "--steps", "2", "--unshard", transport, "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if r.returncode != 0:
        failures.append(f"{transport}: exit {r.returncode}:\n{r.stdout[-1500:]}")
        continue
    v = json.loads(r.stdout)
    if not v["bitwise_equal"]:
        failures.append(f"{transport}: not bitwise equal to the oracle")
    unshard[transport] = v["bytes"]["runtime"]["unshard"]
    print(f"  {transport:15} bitwise {v['bitwise_equal']}, unshard {unshard[transport]}")
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
