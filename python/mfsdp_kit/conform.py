"""conform(ref, cand): `mfsdp conform --json` on a reference and a candidate dump, as a report object,
and assert_conforms, the test helper that fails with the report's first divergence."""
import json
import os
import tempfile

from .tool import run_mfsdp


class Report(dict):
    """mfsdp conform's JSON report (docs/conformance.md) with its text beside it."""

    @property
    def verdict(self):
        return self["verdict"]  # "equal", "within_tolerance" or "differs"

    @property
    def text(self):
        return self["_text"]

    @property
    def first_divergence(self):
        """The first value outside the tolerance (or, under exact, the first difference), as a line."""
        v = self.get("first_outside") or self.get("first_difference")
        if not v:
            return None
        return (f"step {v['step']} {v['kind']}{' ' + v['name'] if v.get('name') else ''}: {v['mismatches']} of {v['numel']} "
                f"element(s) differ, max |diff| {v['max_abs_diff']}, max {v['max_ulp']} ULP")


def _dir(d):
    return d.dump.dir if hasattr(d, "dump") else getattr(d, "dir", d)


def conform(ref, cand, tolerance="exact", mfsdp=None):
    """Compares dump `cand` (a directory) with `ref` (a Reference, a Dump or a directory) under
    `tolerance` ("exact", "rtol=R,atol=A" or a tolerance file). Bad input (headers that disagree, a
    broken or incomplete dump) raises ToolError with mfsdp's message."""
    with tempfile.TemporaryDirectory(prefix="mfsdp_kit_conform_") as tmp:
        out = os.path.join(tmp, "report.json")
        code, text = run_mfsdp(["conform", _dir(ref), _dir(cand), "--tolerance", tolerance, "--json", out], mfsdp, ok=(0, 1))
        report = Report(json.load(open(out)))
    report["_text"] = text
    report["_exit"] = code
    return report


def assert_conforms(ref, cand, tolerance="exact", bitwise=False, mfsdp=None):
    """Raises AssertionError (a pytest failure) with the first divergence and the report when `cand`
    does not conform (with bitwise=True: unless it is bitwise equal). Returns the report."""
    r = conform(ref, cand, tolerance, mfsdp)
    ok = r.verdict == "equal" if bitwise else r.verdict in ("equal", "within_tolerance")
    if not ok:
        raise AssertionError(f"{_dir(cand)} does not conform to {_dir(ref)} ({r.verdict} under {tolerance}): "
                             f"first divergence at {r.first_divergence}\n{r.text}")
    return r
