"""mfsdp_kit: check a distributed Muon (or any torch optimizer) against the MatrixFSDP oracle.

    ref = Reference.load(oracle_dump)        # model, data, hyperparameters, W, mesh of the oracle's run
    rec = Recorder(model, ref, out_dir, [muon, adamw])
    ... rec.grads() before optimizer.step(), rec.step(loss) after it ...
    report = conform(ref, out_dir)           # mfsdp conform --json
    replay(ref, make_optimizer)              # one-step replay: a verdict per tensor and step

See docs/conformance.md.
"""
from .trajectory import Dump, DumpError, TrajectoryWriter  # noqa: F401
from .conform import Report, assert_conforms, conform  # noqa: F401,E402
from .recorder import Recorder, RecorderError  # noqa: F401,E402
from .reference import Reference, ReferenceError  # noqa: F401,E402
from .tool import ToolError  # noqa: F401,E402
from .replay import ReplayReport, replay  # noqa: F401,E402
