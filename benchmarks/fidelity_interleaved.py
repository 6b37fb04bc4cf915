"""Replay fidelity measured against the live original, interleaved in one process.

On a shared host the machine's speed drifts by tens of percent over minutes, so a replay timed
now and an original timed at capture time differ by the drift as much as by the replay's error.
For the bundled traces the original step can be rebuilt (scripts/make_traces.py), and with
``transformers`` installed so can small models of the kinds the corpus holds and others, built
from a config (no weights downloaded): encoders (BERT, DistilBERT, DeBERTa-v2), decoders (GPT-2,
Llama with grouped-query attention, Mixtral's mixture of experts), encoder-decoders (T5, BART,
Whisper over audio features), vision models (ViT, ConvNeXt, Swin), models whose step is thousands
of small ops (Mamba's selective scan and RWKV's recurrence, on a CPU loops over positions),
training and inference; and,
beside the bundled CNN inference and recommender training, a residual CNN's training, a
recommender's inference of other shapes, an LSTM language model's training, and the inference of
a batch-first transformer decoder and of a GRU encoder (whose parameters' requires_grad flag
decides their matmuls' path), a statically quantized residual CNN's inference (int8 kernels), the
recommender's inference with int8 tables and linears (``qrec_infer``), a recommender's inference
over a keyed jagged batch cut into bags in the step (``rec_jagged_infer``) and,
with torchao installed, the inference of feed-forward blocks whose linear layers torchao quantized
(int8 weights and activations; float8 weights). Each is captured with the capture helper, then
this script alternates blocks of original steps and replay iterations in the same process and
compares the medians of all blocks: drift hits both sides alike.

With ``--ops N`` it then profiles N more iterations of each side, alternated, and compares the
time spent inside operators (``measure.inside_operators``: the profiler's self time of every
operator event): the part of a step that a trace holds. The original's remaining time (its Python
module code, the autograd engine's and the optimizer's own work) is not in a trace, and no
operator replay takes it; the ``host`` columns give its share of each side's profiled step.
``--op-timer dispatch`` takes the time inside operators with a clock around each call at the
dispatcher instead (``measure.inside_operators_dispatch``), a second instrument that disturbs the
steps otherwise.

With ``--device cuda`` every model is built, captured, run and replayed on the GPU (a trace of
CUDA ops replayed on cuda:0), each original step and replay iteration ending with a device
synchronisation; ``--ops N`` then compares the GPU's time inside kernels of the two sides (the
profiler's CUDA kernel events), which is what a replay on a GPU must reproduce, and the ``host``
columns give the share of each side's wall-clock step in which the GPU ran no kernel.

    python benchmarks/fidelity_interleaved.py [--rounds 15] [--block 5] [--ops 10] [--device cuda] [NAME ...]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import make_traces  # noqa: E402

from pytest_mystique.errors import reason  # noqa: E402
from pytest_mystique.measure import OP_TIMERS, InsideOperators, inside_operators_alternated, steady_allocator  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.sidecar import load_sidecar, sidecar_path  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402


def _hf_model(tf, kind: str):
    """A small transformers model built from a config (no weights downloaded), its inputs, and
    which of them are labels (left out at inference)."""
    vocab, seq, batch = 4000, 64, 4
    ids = torch.randint(0, vocab, (batch, seq))
    lm = {"input_ids": ids, "labels": ids}
    heads = {"encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256}
    if kind == "vit":  # a vision transformer: patch convolution, then an encoder
        return tf.ViTForImageClassification(tf.ViTConfig(image_size=96, patch_size=16, hidden_size=192,
                                                         num_hidden_layers=2, num_attention_heads=3,
                                                         intermediate_size=768, num_labels=10)), \
            {"pixel_values": torch.randn(8, 3, 96, 96), "labels": torch.randint(0, 10, (8,))}  # fmt: skip
    if kind == "distilbert":
        return tf.DistilBertForMaskedLM(tf.DistilBertConfig(vocab_size=vocab, dim=256, hidden_dim=1024, n_layers=2,
                                                            n_heads=4)), lm  # fmt: skip
    if kind == "bert":
        return tf.BertForMaskedLM(tf.BertConfig(vocab_size=vocab, hidden_size=128, intermediate_size=512,
                                                num_hidden_layers=2, num_attention_heads=4)), lm  # fmt: skip
    if kind == "deberta":  # disentangled relative-position attention (gathers by relative position)
        return tf.DebertaV2ForMaskedLM(tf.DebertaV2Config(vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
                                                          num_attention_heads=4, intermediate_size=256,
                                                          max_position_embeddings=128, relative_attention=True,
                                                          position_buckets=32, pos_att_type=["p2c", "c2p"])), lm  # fmt: skip
    if kind == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=vocab, n_embd=128, n_layer=2, n_head=4, n_positions=seq)), lm
    if kind == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=352,
                                                  num_hidden_layers=2, num_attention_heads=4,
                                                  num_key_value_heads=2)), lm  # fmt: skip
    if kind == "mixtral":  # a mixture of experts: tokens routed to 2 of 4 experts (data-dependent indices)
        return tf.MixtralForCausalLM(tf.MixtralConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, num_local_experts=4,
                                                      num_experts_per_tok=2)), lm  # fmt: skip
    if kind == "t5":  # encoder-decoder
        return tf.T5ForConditionalGeneration(tf.T5Config(vocab_size=vocab, d_model=128, d_kv=32, d_ff=256,
                                                         num_layers=2, num_heads=4, decoder_start_token_id=0,
                                                         pad_token_id=0)), \
            {"input_ids": ids, "labels": torch.randint(0, vocab, (batch, seq // 2))}  # fmt: skip
    if kind == "bart":  # encoder-decoder with learned positions
        return tf.BartForConditionalGeneration(tf.BartConfig(vocab_size=vocab, d_model=128, encoder_layers=2,
                                                             decoder_layers=2, max_position_embeddings=128,
                                                             **heads)), \
            {"input_ids": ids, "labels": torch.randint(0, vocab, (batch, seq // 2))}  # fmt: skip
    if kind == "whisper":  # speech encoder-decoder: 1-d convolutions over mel features
        return tf.WhisperForConditionalGeneration(tf.WhisperConfig(vocab_size=vocab, d_model=128, encoder_layers=2,
                                                                   decoder_layers=2, num_mel_bins=40,
                                                                   max_source_positions=100, max_target_positions=64,
                                                                   pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                                   decoder_start_token_id=1, **heads)), \
            {"input_features": torch.randn(2, 40, 200), "labels": torch.randint(0, vocab, (2, 16))}  # fmt: skip
    if kind == "mamba":  # a state-space model: on a CPU its selective scan is a loop of small ops per position
        return tf.MambaForCausalLM(tf.MambaConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
                                                  state_size=16)), lm  # fmt: skip
    if kind == "rwkv":  # a linear-attention RNN: on a CPU a loop of small elementwise ops per position
        return tf.RwkvForCausalLM(tf.RwkvConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
                                                attention_hidden_size=128, intermediate_size=256,
                                                context_length=seq)), lm  # fmt: skip
    if kind == "convnext":  # a modern CNN: depthwise 7x7 convolutions, layer norm, GELU
        return tf.ConvNextForImageClassification(tf.ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1],
                                                                   num_labels=10, image_size=64)), \
            {"pixel_values": torch.randn(8, 3, 64, 64), "labels": torch.randint(0, 10, (8,))}  # fmt: skip
    if kind == "swin":  # windowed attention: rolls, window partitions
        return tf.SwinForImageClassification(tf.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                                           num_heads=[2, 4], window_size=4, num_labels=10)), \
            {"pixel_values": torch.randn(8, 3, 64, 64), "labels": torch.randint(0, 10, (8,))}  # fmt: skip
    raise KeyError(kind)


def _hf(kind: str, train: bool):
    """A small transformers model's step (training: loss, backward, optimizer step)."""

    def make():
        import transformers as tf

        model, kw = _hf_model(tf, kind)
        if not train:
            model.eval()
            seq2seq = model.config.is_encoder_decoder  # the decoder needs its input
            inputs = {k: v for k, v in kw.items() if k != "labels" or seq2seq}

            def infer():
                with torch.no_grad():
                    model(**inputs)

            return infer, None
        # SGD with momentum for DistilBERT (an optimizer of another kind: a loop of in-place updates)
        opt = (torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9) if kind == "distilbert"
               else torch.optim.AdamW(model.parameters(), lr=1e-4))  # fmt: skip

        def step():
            opt.zero_grad()
            model(**kw).loss.backward()
            opt.step()

        return step, None

    return make


HF_MODELS = {f"hf_{k}_{'train' if t else 'infer'}": _hf(k, t)
             for k, t in (("bert", True), ("bert", False), ("distilbert", True), ("gpt2", True), ("llama", True),
                          ("llama", False), ("t5", True), ("vit", True), ("vit", False), ("deberta", True),
                          ("mixtral", True), ("mixtral", False), ("bart", True), ("whisper", True),
                          ("convnext", False), ("swin", False), ("mamba", True), ("mamba", False),
                          ("rwkv", True), ("rwkv", False))}  # fmt: skip


def _lstm_train():
    """A two-layer LSTM language model's training step (fused recurrent kernels, SGD)."""
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.rnn, self.out = nn.Embedding(5000, 128), nn.LSTM(128, 256, 2, batch_first=True), nn.Linear(256, 5000)

        def forward(self, x):
            return self.out(self.rnn(self.emb(x))[0])

    model, x = LM(), torch.randint(0, 5000, (8, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
        opt.step()

    return step, None


def _cnn_train():
    """A residual CNN training step (batch norm in training mode, SGD with momentum)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))  # fmt: skip

        def forward(self, x):
            return torch.relu(x + self.body(x))

    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                          Block(32), nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64),
                          nn.ReLU(), Block(64), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step, None


def _rec_infer(quantized: bool = False):
    """A DLRM-like recommender's inference (embedding bags with skewed ids, MLPs), other tables;
    ``quantized``: its tables quantized to int8 rows (a scale and offset per row, PyTorch's
    weight-only embedding quantization) and its linear layers dynamically to int8, as a CPU
    serves one."""
    model = make_traces.TinyDLRM(tables=(20000, 8000, 3000, 800, 100), dim=64, dense_in=8).eval()
    if quantized:
        import warnings

        import torch.ao.nn.quantized as nnq

        with warnings.catch_warnings():  # (eager-mode quantization is deprecated in favour of torchao)
            warnings.simplefilter("ignore")
            for bag in model.bags:
                bag.qconfig = torch.ao.quantization.float_qparams_weight_only_qconfig
            model.bags = torch.nn.ModuleList(nnq.EmbeddingBag.from_float(bag) for bag in model.bags)
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    batch = 2048
    dense = torch.randn(batch, 8)
    sparse = []
    for bag in model.bags:
        lengths = torch.randint(1, 20, (batch,))
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        sparse.append(((torch.rand(int(lengths.sum())) ** 2 * bag.num_embeddings).long(), offsets))

    def infer():
        with torch.no_grad():
            model(dense, sparse)

    return infer, None


def _rec_jagged_infer():
    """A recommender's inference over a keyed jagged batch, as TorchRec's embedding-bag
    collection runs it on a CPU: one tensor of lengths (a row per key) and one of ids (each key's
    after the one before), cut in the step: the lengths' running totals after a 0, row by row,
    are each key's offsets, and the ids are split by key; tables of different sizes, ids of a
    square's law. Each lookup's bags are what the lengths make them."""
    tables, batch = (100_000, 20_000, 5_000, 1_000), 512
    bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(n, 64, mode="sum", include_last_offset=True) for n in tables)
    top = torch.nn.Linear(64 * len(tables), 1)
    lengths = torch.randint(1, 40, (len(tables) * batch,))
    rows = lengths.view(len(tables), batch).sum(1).tolist()
    ids = torch.cat([(torch.rand(k) ** 2 * n).long() for n, k in zip(tables, rows)])

    def infer():
        with torch.no_grad():
            per_key = lengths.view(len(tables), batch)
            offsets = torch.cat([per_key.new_zeros(len(tables), 1), per_key.cumsum(1)], 1)
            pooled = [bag(part, offsets[k]) for k, (bag, part) in enumerate(zip(bags, ids.split(rows)))]
            top(torch.cat(pooled, 1))

    return infer, None


def _rec_train_hot():
    """A recommender's training step over a large table (a million rows, 256 MB) whose ids follow a
    power law, as real ones do (Zipf, s = 1.1: a few hot rows take most lookups), with sparse
    gradients and SGD: which rows the lookups read decides the step's time."""
    rows, batch, per = 1_000_000, 2048, 40
    bag, top = torch.nn.EmbeddingBag(rows, 64, mode="sum", sparse=True), torch.nn.Linear(64, 1)
    opt = torch.optim.SGD([*bag.parameters(), *top.parameters()], lr=0.01)
    ranks = torch.distributions.Categorical(probs=1.0 / torch.arange(1, 100_001) ** 1.1).sample((batch * per,))
    ids, offsets = torch.randperm(rows)[ranks], torch.arange(0, batch * per, per)
    y = torch.rand(batch, 1)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(top(bag(ids, offsets)), y).backward()
        opt.step()

    return step, None


def _decoder_infer():
    """Inference of a batch-first transformer decoder (torch.nn.TransformerDecoder, two layers)
    over a memory, in eval mode: its cross-attention takes no fast path and projects the
    sequence-first transpose of its inputs, whose matmuls take the path that the parameters'
    requires_grad flag chooses (pytest_mystique.grad_flags)."""
    nn = torch.nn
    layer = nn.TransformerDecoderLayer(256, 4, 1024, batch_first=True)
    model = nn.TransformerDecoder(layer, 2).eval()
    tgt, memory = torch.randn(16, 32, 256), torch.randn(16, 64, 256)

    def infer():
        with torch.no_grad():
            model(tgt, memory)

    return infer, None


def _encoder_infer():
    """Inference of a batch-first transformer encoder (torch.nn.TransformerEncoder, two layers) in
    eval mode without grad: each layer is one fused ``_transformer_encoder_layer_fwd``, whose
    weights only the parts it runs inside say the range of."""
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(16, 64, 256)

    def infer():
        with torch.no_grad():
            model(x)

    return infer, None


def _gru_infer():
    """A two-layer GRU encoder's inference over batch-first sequences (its per-step linear layers
    read the input's sequence-first transpose)."""
    model, x = torch.nn.GRU(128, 256, 2, batch_first=True).eval(), torch.randn(16, 64, 128)

    def infer():
        with torch.no_grad():
            model(x)

    return infer, None


def _quantized_resnet_infer(how: str = "eager"):
    """Inference of a statically quantized residual CNN (eager-mode quantization, the x86 backend:
    int8 kernels of FBGEMM and oneDNN): a stem of stride 2, three stages of two residual blocks
    (convolutions fused with their batch norms and ReLUs, 1x1 projections where a stage narrows, a
    quantized add), a pooled linear head; activations quint8, weights qint8 per channel. A trace
    records the packed weights as an opaque object; the capture helper records each one's geometry.
    ``how="pt2e"``: the same network quantized through export (torchao's prepare_pt2e and
    convert_pt2e, the x86 quantizer), which runs its convolutions in float between quantize and
    dequantize ops (``quantized_decomposed``), as it does until a compiler fuses them."""
    from torch.ao.quantization import DeQuantStub, QuantStub, fuse_modules

    nn = torch.nn

    def conv_bn(cin: int, cout: int, k: int, stride: int) -> list:
        return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(), *conv_bn(cout, cout, 3, 1))
            self.short = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride > 1 or cin != cout else nn.Identity()
            self.add = torch.ao.nn.quantized.FloatFunctional()

        def forward(self, x):
            return self.add.add_relu(self.body(x), self.short(x))

        def fuse(self) -> None:
            fuse_modules(self.body, [["0", "1", "2"], ["3", "4"]], inplace=True)
            if isinstance(self.short, nn.Sequential):
                fuse_modules(self.short, [["0", "1"]], inplace=True)

    widths = [(32, 32, 1), (32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1)]
    blocks = [Block(*w) for w in widths]
    model = nn.Sequential(QuantStub(), *conv_bn(3, 32, 3, 2), nn.ReLU(), *blocks, nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(128, 100), DeQuantStub()).eval()  # fmt: skip
    x = torch.randn(8, 3, 96, 96)
    if how == "pt2e":
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
        prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
        prepared(x)  # (calibration)
        model = convert_pt2e(prepared)
    else:
        _quantize_eagerly(model, blocks, x)

    def infer():
        with torch.no_grad():
            model(x)

    return infer, None


def _quantize_eagerly(model, blocks, x) -> None:
    """``model`` (a stem, ``blocks``, a head) quantized in place the eager way: fused, calibrated on ``x``."""
    from torch.ao.quantization import convert, fuse_modules, get_default_qconfig, prepare

    with warnings.catch_warnings():  # (eager-mode quantization is deprecated in favour of torchao)
        warnings.simplefilter("ignore")
        torch.backends.quantized.engine = "x86"
        fuse_modules(model, [["1", "2", "3"]], inplace=True)
        for b in blocks:
            b.fuse()
        model.qconfig = get_default_qconfig("x86")
        prepare(model, inplace=True)
        with torch.no_grad():
            model(x)  # (calibration)
        convert(model, inplace=True)


def _torchao_infer(config: str):
    """Inference of two transformer feed-forward blocks (layer norm, 512 -> 2048 -> 512, GELU,
    64 tokens) whose linear layers torchao quantized: ``int8`` int8 weights and int8 activations
    quantized on the fly (its own operators choose the scales), ``float8`` float8 weights widened
    for each product."""
    from torchao.quantization import Float8WeightOnlyConfig, Int8DynamicActivationInt8WeightConfig, quantize_

    nn = torch.nn
    model = nn.Sequential(*[nn.Sequential(nn.LayerNorm(512), nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
                            for _ in range(2)]).eval()  # fmt: skip
    quantize_(model, Int8DynamicActivationInt8WeightConfig() if config == "int8" else Float8WeightOnlyConfig())
    x = torch.randn(64, 512)

    def infer():
        with torch.no_grad():
            model(x)

    return infer, None


#: Models of the kinds the bundled traces have, but other shapes and the other mode (captured on the spot).
TORCH_MODELS = {"cnn_train": _cnn_train, "rec_infer": _rec_infer, "lstm_train": _lstm_train,
                "rec_train_hot": _rec_train_hot, "decoder_infer": _decoder_infer, "encoder_infer": _encoder_infer,
                "gru_infer": _gru_infer, "qresnet_infer": _quantized_resnet_infer,
                "qrec_infer": functools.partial(_rec_infer, True), "rec_jagged_infer": _rec_jagged_infer}  # fmt: skip
#: With torchao installed, models whose layers it quantized.
TORCHAO_MODELS = {"ao_int8_infer": functools.partial(_torchao_infer, "int8"),
                  "ao_float8_infer": functools.partial(_torchao_infer, "float8"),
                  "qresnet_pt2e_infer": functools.partial(_quantized_resnet_infer, "pt2e")}  # fmt: skip


#: Models whose steps run on the CPU alone, with why (skipped under --device cuda; seen failing on an
#: H200): PyTorch's eager quantized operators have kernels for the CPU only.
CPU_ONLY = {"qresnet_infer": "quantized::conv2d_prepack has no kernel for CUDA (eager quantization is CPU-only)",
            "qrec_infer": "quantized::embedding_bag_prepack has no kernel for CUDA (eager quantization is CPU-only)"}


def models() -> dict:
    out = dict(make_traces.MODELS) | TORCH_MODELS
    if importlib.util.find_spec("torchao") is not None:
        out |= TORCHAO_MODELS
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("# transformers is not installed: only the bundled models", file=sys.stderr)
        return out
    return out | HF_MODELS


def block(fn, n: int, before=None) -> list[float]:
    out = []
    for _ in range(n):
        if before is not None:
            before()  # untimed, as in the plugin
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def alternate(step, run_replay, reset, rounds: int, size: int) -> tuple[list[float], list[float], list[float]]:
    """Blocks of ``size`` original steps and replay iterations (``reset`` untimed before each),
    alternated for ``rounds`` rounds, which side goes first swapping each round, after a warm-up
    block of each: the original's samples, the replay's, and each round's ratio of medians."""
    block(step, 5)
    block(run_replay, 5, reset)
    orig, rep, ratios = [], [], []
    for r in range(rounds):
        a = block(step, size) if r % 2 == 0 else block(run_replay, size, reset)
        b = block(run_replay, size, reset) if r % 2 == 0 else block(step, size)
        o, p = (a, b) if r % 2 == 0 else (b, a)
        orig += o
        rep += p
        ratios.append(statistics.median(p) / statistics.median(o))
    return orig, rep, ratios


def inside_kernels(fn, before, device) -> InsideOperators | None:
    """The GPU's time inside kernels in one call of ``fn`` (after ``before``), and the share of the
    wall-clock call it covers (None where the profiler gives no kernel events)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if before is not None:
        before()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    averages = prof.key_averages()
    host = {e.key for e in averages if e.device_type != DeviceType.CUDA}
    # a record_function range (the optimizer's step) shows on the GPU's timeline too,
    # spanning the kernels inside it: not a kernel
    events = [e for e in averages if e.device_type == DeviceType.CUDA and e.key not in host
              and not getattr(e, "is_user_annotation", False)]  # fmt: skip
    busy = sum(getattr(e, "self_device_time_total", 0.0) for e in events) / 1e6
    if not events or busy <= 0:
        return None
    return InsideOperators(busy, min(1.0, busy / wall))


def summary(label: str, errors: list[float]) -> None:
    """The last line of a table: geomean, worst and count within 5% of the errors |ratio - 1|."""
    if errors:
        geo = math.exp(statistics.mean(math.log(max(e, 1e-6)) for e in errors))
        print(f"{label}: geomean |ratio-1| = {geo * 100:.1f}%, worst {max(errors) * 100:.1f}%, "
              f"within 5%: {sum(e <= 0.05 for e in errors)}/{len(errors)}")  # fmt: skip


def op_timer_option(ap: argparse.ArgumentParser, more: dict[str, str] | None = None) -> None:
    """``--op-timer``: the instrument that times the operators for ``--ops`` on the CPU
    (:data:`measure.OP_TIMERS`), and ``more`` choices (name -> what it is, for the help)."""
    more = more or {}
    ap.add_argument("--op-timer", choices=(*OP_TIMERS, *more), default="profiler",
                    help="the instrument for --ops on the CPU: profiler (the default); dispatch, a clock around "
                         "every call at the dispatcher (measure.inside_operators_dispatch)"
                         + "".join(f"; {name}, {what}" for name, what in more.items()))  # fmt: skip


def timer_label(timer: str) -> str:
    """What a summary line adds after "time inside operators" for the instrument ``timer``."""
    return "" if timer == "profiler" else f" ({timer} timer)"


def compare_model(name: str, build, device: torch.device, tmp: Path, args) -> tuple[str, float, float | None]:
    """Build model ``name`` on ``device``, capture its step (or take its bundled trace), alternate
    the step with the trace's replay: the table's line, |ratio - 1| of the whole step, and of the
    time inside operators (kernels on a GPU) where ``--ops`` asked for it."""
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    with device:  # parameters and inputs made on the device
        made, _ = build()
    step = made
    if cuda:
        def step(made=made):
            made()
            torch.cuda.synchronize(device)

    path = ROOT / "traces" / f"{name}.json.gz"
    if cuda or name not in make_traces.MODELS:  # the bundled traces are of CPU steps
        path = tmp / f"{name}.json.gz"
        capture_step(step, path, warmup=3, runs=3)
        if args.uniform_ids:
            side = load_sidecar(path)
            side.pop("index_inputs", None)
            sidecar_path(path).write_text(json.dumps(side))
    replay = Replay(load_trace(path), device).prepare()

    def run_replay(replay=replay):
        with torch.no_grad():
            replay.run()
        if cuda:
            torch.cuda.synchronize(device)

    orig, rep, ratios = alternate(step, run_replay, replay.between_iterations, args.rounds, args.block)
    ratio = statistics.median(rep) / statistics.median(orig)
    q = statistics.quantiles(ratios, n=4)
    extra, op_err = "", None
    if args.ops:
        measure = functools.partial(inside_kernels, device=device) if cuda else None
        try:
            got = inside_operators_alternated((step, run_replay), args.ops, (None, replay.between_iterations), measure,
                                              timer=args.op_timer)  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the step's ratio stands; the operators' measure is reported failed
            got, extra = None, f"  ops FAILED: {reason(e)}"
            traceback.print_exc()
        if got is not None:
            o, r = got
            op_err = abs(r.ops_s / o.ops_s - 1)
            extra = f" {r.ops_s / o.ops_s:>9.3f} {1 - o.share:>9.1%} {1 - r.share:>9.1%}"
    line = (f"{name:<20} {replay.report.ops_replayed:>5} {statistics.median(orig) * 1e3:>12.2f} "
            f"{statistics.median(rep) * 1e3:>10.2f} {ratio:>7.3f} {q[0]:>7.3f}-{q[2]:<7.3f}{extra}")  # fmt: skip
    return line, abs(ratio - 1), op_err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--ops", type=int, default=0, metavar="N",
                    help="then compare the time inside operators over N profiled iterations of each side")
    op_timer_option(ap)
    ap.add_argument("--uniform-ids", action="store_true",
                    help="leave out the capture's record of the index inputs' spread (ids drawn uniformly)")
    ap.add_argument("--device", default="cpu", help="cuda[:N]: build, capture, run and replay on that GPU")
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (the ratios' spread needs two rounds)")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"no GPU here for --device {args.device}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    steady_allocator()  # as the plugin does before timing
    table = models()
    tmp = Path(tempfile.mkdtemp(prefix="fidelity."))
    extra = f" {'kern ratio' if cuda else 'ops ratio':>9} {'host orig':>9} {'host repl':>9}" if args.ops else ""
    print(f"{'trace':<20} {'ops':>5} {'original ms':>12} {'replay ms':>10} {'ratio':>7} {'block ratio IQR':>16}{extra}")
    errors, op_errors, failed = [], [], []
    for name in args.names or list(table):
        if name not in table:
            failed.append(f"{name}: no such model (known: {', '.join(table)})")
            continue
        if cuda and name in CPU_ONLY:
            print(f"{name:<20} skipped: {CPU_ONLY[name]}", flush=True)
            continue
        try:
            line, err, op_err = compare_model(name, table[name], device, tmp, args)
        except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others go on
            traceback.print_exc()
            print(f"{name:<20} FAILED: {reason(e)}", flush=True)
            failed.append(name)
            continue
        print(line, flush=True)
        errors.append(err)
        if op_err is not None:
            op_errors.append(op_err)
    summary("interleaved fidelity", errors)
    summary("GPU time inside kernels" if cuda else f"time inside operators{timer_label(args.op_timer)}", op_errors)
    if failed:
        print(f"failed: {len(failed)} ({'; '.join(failed)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
