"""The environment fingerprint: what a timing depends on.

Two parts: the *hardware* (device name, CPU model, thread count), which keys the baselines so
that numbers are only ever compared on the same kind of machine, and the *software* (torch, CUDA,
driver, Python, numpy), which is recorded beside them so a report can say what changed when a
trace got slower after an upgrade.
"""

from __future__ import annotations

import hashlib
import platform
import re
from functools import lru_cache
from pathlib import Path

import numpy
import torch

HARDWARE_KEYS = ("device_name", "cpu_model", "threads")
#: Raised when a change to the replay alters what a replayed step does: 2 = BatchNorm running means
#: centred, optimizer state from zero, inputs from a pool of draws, FBGEMM's table metadata derived
#: (baselines recorded before lack the field); 3 = index ranges passed back to the inputs they come
#: from, 0-dim integers 1 or 2, parameters written through an alias refilled, tensors filled outside
#: the ops seeded, autocast wrappers looked through; 4 = composite operators whose parts made what a
#: later op reads replayed through those parts, Cholesky inputs positive-definite, quantized linears'
#: packed weights and sparse tensors made by replayed ops rebuilt; 5 = ops called through their Python
#: bindings, arguments equal to their default left out (a step of many small ops runs faster), a
#: training step's forward recording autograd graphs (let go where the backward pass starts; nothing
#: after the last backward pass records), outputs whose shape the data decide not bound; 6 = the timed
#: iteration as straight-line code (0.2-0.3 us per op less: the steps of many small ops run faster);
#: 7 = a CTC loss's labels and lengths seeded as a speech batch's (its work grows with the target
#: lengths), its backward reading the forward's own outputs; a tensor read with the ids or the place
#: of one whose memory a later allocation took is not bound to that earlier tensor; 8 = an input that
#: an operator inside a replayed one made as a view of an earlier output (the flattened input
#: ``aten::linear`` saves for the backward pass) read through a view of that output, not seeded;
#: 9 = the state a step writes in place re-seeded every few iterations, each time followed by an
#: untimed iteration, not before every iteration; floating ranges passed back through views and
#: conversions, einsum weights in a layer's range, wrapped-number divisors 1; 10 = requirements
#: passed back to the tensor an op derived from where a later op reallocated its storage (a sparse
#: feature's lengths summing to its values), FBGEMM 1.x's lookups replayed, an inference step's
#: tables filled, a TBE's ids over all of its rows, each id in one table; 11 = an inference step's
#: outputs held until the op that took their memory in the original, not freed after their last read;
#: 12 = an op's ``eps`` recorded as 0.0 taken as 1e-8 (the trace keeps six decimals: a layer norm's
#: 1e-12 read 0.0, and a row of equal values went NaN); the build lets go of each output after its own
#: last read, so a trace of several steps no longer starts its timed iterations on a C heap that its
#: build grew to several times an iteration's memory (the DDP ResNet's: 27 s an iteration, its
#: allocations served from that heap; now 30-34 s, its large outputs mapped and faulted in each
#: iteration, as a process that ran only its steps would); 13 = under autocast, an operator whose
#: parts autocast cast (``einsum``'s ``bmm``) replayed through its parts, a wrapper that read its
#: kept copy of a weight (no cast among its children) looked through, and the casts that made such
#: copies run with autograd on, so that a ``matmul`` by one folds its batch as the original's did;
#: 14 = an index input of a few rows of coordinates (a graph's edge index) whose recorded rows spread
#: unlike each other drawn row by row, each with its own spread; 15 = a call on tensors recorded
#: without storage that ran operators inside it replayed through them (``torch.func``'s wrappers),
#: unless they read a sparse tensor's structure (a sparse gradient's ``add_`` into a dense state now
#: replays as the ``add`` it calls); 16 = a training step's forward ops that ran with grad mode off
#: (their autograd sequence number -1: a ``no_grad`` block, an ``autograd.Function``'s forward, DDP's
#: copies into its buckets) run without recording, the backward pass's ops that ran with it on
#: (activation checkpointing's recomputed forward) with, and an optimizer's state matrices that its step
#: factorises (Shampoo's preconditioners) start at 1e-4 times the identity, not at zero; 17 = where
#: the trace shows the grad mode, every forward op that ran with it on records, after the last backward
#: pass too; a step with a backward pass and no optimizer's step (a manual update, MAML's inner steps)
#: records, the floating inputs its recording ops read requiring grad; a backward pass whose own ops
#: record (``create_graph``) keeps the graphs held where it starts; an op whose indices were seeded for
#: a data-shaped output and then written in place (an offset added) reads seeded indices of its own;
#: 18 = a number assigned into a tensor (``x[i] = 0.5``: through ``lift_fresh``, no op making it) holds
#: the value the capture recorded, an integer input that no op reads as indices (nor sums) holds values in
#: the original's recorded range, and ``one_hot`` refusing classes computed from the data reads seeded ones;
#: 19 = a jagged batch's lengths sum, row by row, to the ids of the bags their running totals cut (the
#: offsets' layout passes back through a row view, a 0 column's concatenation and a cumsum), and views of
#: one tensor of ids each hold their own consumer's range (each drawn with its recorded spread), a table of
#: features is drawn column by column, an input that aliases an earlier one takes no sidecar record, and an
#: operator whose part made a tensor before a view of its memory is opened (batch_norm over a sequence);
#: 20 = an index range passes back through an integer sum (``lengths - 1``, ``ids + offsets``), and a
#: causal mask and an additive mask's fill lie where the original's did; 21 = an inference step that ran
#: with grad mode on and made autograd graphs (its sequence numbers advance) records them; 22 = there, a
#: floating input that the capture recorded without ``requires_grad`` (the data) stays without it, and
#: the iterations run with autograd's anomaly detection as the capture recorded it (off without a record);
#: 23 = one-element inputs take the capture's records, and pairs of index inputs that never agreed
#: element by element (a neighbour list's atoms i and j) are kept apart; 24 = an operator is replayed
#: through its parts for a later read of memory made inside it only where the reader runs after the
#: backward pass started (a forward op's number in recycled memory had opened Equiformer's masked select);
#: 25 = optimizer state whose values reach a matrix the step factorises or solves against starts
#: nonsingular even where it is kept packed (PSGD's triangular factors as lines: 1e-4 in every element);
#: 26 = a table of regions that torchvision's RoI operators pool holds an image of the batch and a box
#: inside it in each row, an index after a boolean mask of k dimensions indexes the dimension after
#: those k (``targets[mask, classes]``), and torch_scatter's and torch_sparse's indices and offsets are
#: valid for their kernels; 27 = an index input the original held in order is drawn in order, pointers
#: from 0 to a size span as the original's did, a stand-in for an output of another shape has memory
#: of its own, torch_cluster's and torch_spline_conv's inputs are valid for their kernels, a C++ autograd
#: node whose backward computes outside operators is called, and an operator whose parts read memory its
#: own code made is not replayed through them; 28 = an input an op reads as a sorted sequence (bucketize's
#: boundaries, searchsorted's) is drawn sorted, an integer one evenly over its range, torch_cluster's
#: ``fps`` samples the share of points its recorded output holds, and stand-ins never share memory.
REPLAY_VERSION = 28


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@lru_cache(maxsize=1)
def driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+([\d.]+)", text)
    return m.group(1) if m else None


def fingerprint(device: torch.device, threads: int) -> dict:
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = "cpu"
    return {
        "device_name": device_name,
        "cpu_model": cpu_model(),
        "threads": int(threads),
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda) if torch.version.cuda else None,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "driver": driver_version() if device.type == "cuda" else None,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "os": f"{platform.system()} {platform.release()}",
        # how the replay rebuilds a step (its data, its plan): a change to it moves timings as an
        # upgrade would, so it is part of the environment a baseline was recorded in
        "replay": REPLAY_VERSION,
    }


def hardware_key(env: dict) -> str:
    """A directory-safe name for the hardware part of ``env``: readable prefix plus a hash."""
    raw = "|".join(str(env.get(k)) for k in HARDWARE_KEYS)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    dev = re.sub(r"[^A-Za-z0-9]+", "-", str(env.get("device_name", "dev"))).strip("-").lower()[:24] or "dev"
    return f"{dev}-t{env.get('threads')}-{digest}"


def differences(old: dict, new: dict) -> list[str]:
    """Human-readable lines for each fingerprint field that changed, e.g. ``torch 2.13.0 -> 2.14.1``."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a != b:
            out.append(f"{key} {a} -> {b}")
    return out
