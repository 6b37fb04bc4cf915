"""Coverage of the replay over features of PyTorch programs that traces carry.

Each case is a small step using one feature (sparse gradients, torch.compile, dynamic and static
quantization, eager and through export, torchao's int8 and float8 layers, autocast, foreach and fused optimizers, packed sequences, activation checkpointing,
sampling, data-dependent shapes, linear algebra, torch.func's transforms, parametrizations, random
layers, scatter reductions, 3-D convolutions, recurrent cells, order statistics, losses, an eager
flex_attention, torch.cond, a decoding loop with a growing key/value cache, quantization-aware
training, L-BFGS and Adafactor, a spectrogram, a nested jagged tensor, an exported module,
torch.distributions, torch.func.hessian, a custom autograd Function, the program's own generator,
MKL-DNN tensors, complex layers, a vectorized jacobian, float8 casts, a PPO update, a Hungarian
matching, a masked autoencoder, a vector-quantised codebook, beam search, an optimizer in the
backward pass, operators that warn, ...), captured here with the capture helper and
replayed on the CPU. The table gives, per case: ops selected / replayed / skipped, the notes the
report gave (the replay's own data where the trace holds none), and whether two further
iterations ran. The last line counts the cases that replay every op.

    python benchmarks/feature_coverage.py [CASE ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fidelity_interleaved import _quantized_resnet_infer, _torchao_infer  # noqa: E402

from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def _train(model, loss, opt=None):
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    return step


def sparse_embedding():
    emb = nn.Embedding(10000, 64, sparse=True)
    x = torch.randint(0, 10000, (256, 8))
    return _train(emb, lambda: emb(x).sum(), torch.optim.SparseAdam(emb.parameters()))


def message_passing():
    n, e, d = 500, 4000, 32
    x, src, dst = torch.randn(n, d), torch.randint(0, n, (e,)), torch.randint(0, n, (e,))
    lin = nn.Linear(d, d)

    def loss():
        agg = torch.zeros(n, d).index_add_(0, dst, lin(x)[src])
        deg = torch.zeros(n).scatter_add_(0, dst, torch.ones(e)).clamp(min=1)
        return (agg / deg[:, None]).relu().sum()

    return _train(lin, loss, torch.optim.Adam(lin.parameters()))


def sparse_adjacency():
    """A graph convolution over a sparse adjacency matrix that is an input of the step."""
    n, e, d = 2000, 16000, 32
    adj = torch.sparse_coo_tensor(torch.randint(0, n, (2, e)), torch.rand(e), (n, n)).coalesce()
    x, lin = torch.randn(n, d), nn.Linear(d, d)
    return _train(lin, lambda: torch.sparse.mm(adj, lin(x)).relu().sum(), torch.optim.Adam(lin.parameters()))


def compiled():
    model = torch.compile(nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)))
    x = torch.randn(32, 64)
    return lambda: model(x)


def quantized_dynamic():
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    q = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(16, 128)
    return lambda: q(x)


def quantized_static():
    return _quantized_resnet_infer()[0]  # (its convolutions' packed weights: the capture records their geometry)


def quantized_pt2e():
    return _quantized_resnet_infer("pt2e")[0]  # (quantized through export: quantized_decomposed's ops)


def torchao_int8():
    return _torchao_infer("int8")[0]


def torchao_float8():
    return _torchao_infer("float8")[0]


def fft_complex():
    x, w = torch.randn(8, 1024), torch.randn(513, dtype=torch.complex64)
    return lambda: torch.fft.irfft(torch.fft.rfft(x) * w).abs().sum()


def autocast_bf16():
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))

    def loss():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(model(x), y)

    return _train(model, loss)


def grad_scaler_fp16():
    model, scaler = nn.Linear(64, 10), torch.amp.GradScaler("cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def channels_last():
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3)).eval()
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(8, 3, 32, 32).to(memory_format=torch.channels_last)
    return lambda: model(x)


def multihead_attention():
    model, x = nn.MultiheadAttention(64, 4, batch_first=True), torch.randn(4, 32, 64)

    def loss():
        out, weights = model(x, x, x, need_weights=True)
        return out.sum() + weights.sum()

    return _train(model, loss, torch.optim.Adam(model.parameters()))


def fused_adam():
    model, x = nn.Linear(256, 256), torch.randn(16, 256)
    return _train(model, lambda: model(x).sum(), torch.optim.Adam(model.parameters(), fused=True))


def foreach_adamw_clipping():
    model, x = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64)), torch.randn(8, 64)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def data_dependent_shapes():
    x, i = torch.randn(4096), torch.randint(0, 100, (4096,))

    def step():
        v, _ = x.sort()
        u = torch.unique(i, return_counts=True)
        return v.sum() + x.topk(10).values.sum() + u[1].sum() + (x > 0).nonzero().sum() + x[x > 1].sum()

    return step


def upsampling_decoder():
    model = nn.Sequential(nn.ConvTranspose2d(8, 4, 4, 2, 1), nn.Upsample(scale_factor=2, mode="bilinear"),
                          nn.GroupNorm(2, 4), nn.SiLU())  # fmt: skip
    x = torch.randn(2, 8, 16, 16)
    return _train(model, lambda: model(x).pow(2).mean(), torch.optim.Adam(model.parameters()))


def weighted_embedding_bag():
    bag = nn.EmbeddingBag(1000, 32, mode="sum")
    x, offsets, w = torch.randint(0, 1000, (400,)), torch.arange(0, 400, 4), torch.rand(400)
    return _train(bag, lambda: bag(x, offsets, per_sample_weights=w).sum(), torch.optim.Adagrad(bag.parameters()))


def packed_lstm():
    rnn, x = nn.LSTM(32, 64, batch_first=True), torch.randn(8, 20, 32)
    lengths = torch.tensor([20, 18, 15, 15, 10, 7, 5, 2])

    def loss():
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        return nn.utils.rnn.pad_packed_sequence(rnn(packed)[0], batch_first=True)[0].sum()

    return _train(rnn, loss)


def checkpointing():
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.GELU()) for _ in range(3))
    x = torch.randn(16, 64, requires_grad=True)

    def loss():
        h = x
        for block in blocks:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
        return h.sum()

    return _train(blocks, loss)


def top_p_sampling():
    logits = torch.randn(4, 1000)

    def step():
        sp, si = F.softmax(logits / 0.7, -1).sort(descending=True)
        sp[sp.cumsum(-1) > 0.9] = 0
        return si.gather(-1, torch.multinomial(sp / sp.sum(-1, keepdim=True), 1))

    return step


def vision_ops():
    x, grid = torch.randn(2, 16, 32, 32, requires_grad=True), torch.rand(2, 24, 24, 2) * 2 - 1

    def step():
        parts = (F.interpolate(x, scale_factor=2), F.pixel_shuffle(x, 2), F.unfold(x, 3),
                 F.grid_sample(x, grid, align_corners=False), F.max_pool2d(x, 2), F.avg_pool2d(x, 3, 1, 1))  # fmt: skip
        sum(p.mean() for p in parts).backward()

    return step


def linear_algebra():
    a, b, s = torch.randn(64, 64), torch.randn(100, 16), torch.randn(64, 64)
    spd = s @ s.T + 64 * torch.eye(64)
    return lambda: (torch.linalg.svd(a)[1].sum() + torch.linalg.qr(a)[0].sum() + torch.linalg.inv(spd).sum()
                    + torch.linalg.cholesky(spd).sum() + torch.cdist(b, b).sum() + torch.linalg.eigh(spd)[0].sum())


def bucketing():
    bounds, x = torch.linspace(-3, 3, 100), torch.randn(10000)
    return lambda: torch.bucketize(x, bounds).sum() + torch.searchsorted(bounds, x).sum() + torch.histc(x, 50).sum()


def ctc_loss():
    lp = torch.randn(50, 4, 20).log_softmax(2).detach().requires_grad_()
    targets, in_lens, tg_lens = torch.randint(1, 20, (4, 10)), torch.full((4,), 50), torch.randint(5, 10, (4,))
    return lambda: F.ctc_loss(lp, targets, in_lens, tg_lens).backward()


def causal_attention_rmsnorm():
    q, w = torch.randn(2, 4, 64, 32, requires_grad=True), torch.ones(32)
    return lambda: F.rms_norm(F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=0.1), (32,), w) \
        .sum().backward()  # fmt: skip


def gradient_penalty():
    """A gradient of a gradient: a critic's penalty on the norm of its input gradient (WGAN-GP)."""
    critic, x = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1)), torch.randn(16, 32, requires_grad=True)

    def loss():
        (g,) = torch.autograd.grad(critic(x).sum(), x, create_graph=True)
        return critic(x).mean() + ((g.norm(2, dim=1) - 1) ** 2).mean()

    return _train(critic, loss)


def per_sample_gradients():
    """torch.func's vmap over grad: every sample's gradient of a linear model at once."""
    w, x, y = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32, 8)

    def one(w, x, y):
        return ((x @ w.T - y) ** 2).sum()

    return lambda: torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(w, x, y).sum()


def reparametrized_weights():
    """Weight normalisation and spectral normalisation (a power iteration updating its buffers) as
    parametrizations recomputed every forward."""
    p = nn.utils.parametrizations
    model = nn.Sequential(p.weight_norm(nn.Linear(32, 64)), nn.ReLU(), p.spectral_norm(nn.Linear(64, 16)))
    x = torch.randn(8, 32)
    return _train(model, lambda: model(x).pow(2).mean())


def random_layers():
    """Layers that draw at random in training: RReLU's slopes, alpha dropout, fractional max pooling."""
    conv, x = nn.Conv2d(3, 8, 3), torch.randn(2, 3, 33, 33)
    model = nn.Sequential(conv, nn.RReLU(), nn.FractionalMaxPool2d(2, output_ratio=0.5), nn.Flatten(),
                          nn.AlphaDropout(0.2), nn.Linear(8 * 15 * 15, 10))  # fmt: skip
    return _train(model, lambda: model(x).logsumexp(1).mean())


def scatter_reductions():
    """Scatter and index reductions into buckets (a segment's max and mean, counts, a put)."""
    x, idx = torch.randn(4096, 16, requires_grad=True), torch.randint(0, 64, (4096,))

    def step():
        out = torch.zeros(64, 16).scatter_reduce(0, idx[:, None].expand(-1, 16), x, "amax", include_self=False)
        mean = torch.zeros(64, 16).index_reduce(0, idx, x, "mean", include_self=False)
        count = torch.zeros(64).index_add(0, idx, torch.ones(4096))
        taken = x.take_along_dim(idx[:, None] % 16, 1)
        (out.sum() + mean.sum() + count.sum() + taken.sum()).backward()

    return step


def video_cnn():
    """Three-dimensional convolutions, their transposes and batch norm over frames (a video model)."""
    model = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.MaxPool3d(2),
                          nn.ConvTranspose3d(8, 4, 2, stride=2), nn.AdaptiveAvgPool3d(1), nn.Flatten())  # fmt: skip
    x = torch.randn(2, 3, 8, 16, 16)
    return _train(model, lambda: model(x).pow(2).mean(), torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))


def recurrent_cells():
    """A bidirectional GRU, an Elman RNN, and an LSTM cell unrolled in Python over time."""
    gru, rnn, cell = nn.GRU(16, 32, bidirectional=True), nn.RNN(64, 32, nonlinearity="tanh"), nn.LSTMCell(32, 32)
    x = torch.randn(12, 4, 16)
    params = [*gru.parameters(), *rnn.parameters(), *cell.parameters()]

    def loss():
        h = rnn(gru(x)[0])[0]
        hc = (torch.zeros(4, 32), torch.zeros(4, 32))
        for t in range(h.shape[0]):
            hc = cell(h[t], hc)
        return hc[0].sum()

    return _train(nn.ParameterList(params), loss)


def order_statistics():
    """Medians, quantiles, k-th values, modes and cumulative maxima and products, with gradients."""
    x = torch.randn(64, 128, requires_grad=True)

    def step():
        parts = (x.median(1).values, x.kthvalue(5, 1).values, x.quantile(torch.tensor([0.1, 0.9]), 1),
                 x.cummax(1).values, x.logcumsumexp(1), (x.abs() + 0.5).cumprod(1), x.argsort(dim=1, stable=True).float())  # fmt: skip
        sum(p.sum() for p in parts).backward()
        return x.round().mode(1).values.sum()

    return step


def interpolation_modes():
    """Resampling by bicubic, nearest-exact, antialiased bilinear and trilinear interpolation."""
    x, v = torch.randn(2, 4, 32, 32, requires_grad=True), torch.randn(1, 2, 8, 16, 16, requires_grad=True)

    def step():
        parts = (F.interpolate(x, scale_factor=2, mode="bicubic"), F.interpolate(x, size=(20, 20), mode="nearest-exact"),
                 F.interpolate(x, size=(12, 12), mode="bilinear", antialias=True),
                 F.interpolate(v, scale_factor=2, mode="trilinear"))  # fmt: skip
        sum(p.square().mean() for p in parts).backward()

    return step


def loss_functions():
    """A dozen losses of classification, ranking, regression and distributions, with their gradients."""
    a, b = torch.randn(32, 10, requires_grad=True), torch.randn(32, 10)
    labels, signs = torch.randint(0, 10, (32,)), torch.randint(0, 2, (32,)).float() * 2 - 1

    def step():
        losses = (F.smooth_l1_loss(a, b), F.huber_loss(a, b, delta=0.5), F.kl_div(a.log_softmax(1), b.softmax(1), reduction="batchmean"),
                  F.binary_cross_entropy_with_logits(a, b.sigmoid(), pos_weight=torch.full((10,), 2.0)),
                  F.margin_ranking_loss(a[:, 0], a[:, 1], signs), F.triplet_margin_loss(a, b, b.flip(0)),
                  F.cosine_embedding_loss(a, b, signs), F.multilabel_soft_margin_loss(a, (b > 0).float()),
                  F.poisson_nll_loss(a, b.abs()), F.gaussian_nll_loss(a, b, torch.ones(32, 10)),
                  F.multi_margin_loss(a, labels), F.cross_entropy(a, labels, label_smoothing=0.1))  # fmt: skip
        sum(losses).backward()

    return step


def embedding_max_norm():
    """An embedding that renormalises the rows it looks up in place (max_norm) and skips a padding row."""
    emb = nn.Embedding(500, 32, max_norm=1.0, padding_idx=0)
    ids = torch.randint(0, 500, (16, 24))
    return _train(emb, lambda: emb(ids).sum(), torch.optim.SGD(emb.parameters(), lr=0.1))


def tensor_contractions():
    """einsum in several patterns, batched and blocked products, Kronecker products, triangles."""
    a, b, c = torch.randn(8, 16, 32, requires_grad=True), torch.randn(8, 32, 24), torch.randn(16, 16)

    def step():
        parts = (torch.einsum("bij,bjk->bik", a, b), torch.einsum("bij,ij->b", a[:, :, :16], c), torch.baddbmm(a[:, :, :24], a, b),
                 torch.addbmm(torch.zeros(16, 24), a, b), torch.tensordot(a, b, dims=([0, 2], [0, 1])),
                 torch.kron(c[:4, :4], c[:4, :4]), torch.block_diag(c[:4, :4], c[:2, :2]), c.tril(-1) + c.triu(1),
                 torch.diag_embed(a[:, 0]))  # fmt: skip
        sum(p.sum() for p in parts).backward()

    return step


def integer_arithmetic():
    """Integer and boolean work: bit operations, floor division, remainders, greatest common divisors."""
    i, j = torch.randint(1, 1000, (4096,)), torch.randint(1, 50, (4096,))
    return lambda: ((i & j) | (i ^ 7)).sum() + (i // j).sum() + (i % j).sum() + torch.fmod(i, j).sum() \
        + torch.gcd(i, j).sum() + (i << 2).sum() + ((i > 500) & ~(j < 10)).sum() + i.clamp(10, 900).sum()  # fmt: skip


def flex_attention_eager():
    """flex_attention without torch.compile: its operator compiles with the eager backend, and
    the trace holds its score function's vmap levels, on wrapper tensors without storage."""
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
    q, k, v = (torch.randn(2, 4, 128, 32) for _ in range(3))
    bias = torch.randn(4)  # (a per-head bias the score function reads)

    def alibi_causal(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score + bias[h] * (kv_idx - q_idx), -float("inf"))

    return lambda: flex_attention(q, k, v, score_mod=alibi_causal)


def control_flow_cond():
    """torch.cond picks a branch from the data (it compiles its branches in eager mode too)."""
    gate, up = nn.Linear(64, 64), nn.Linear(64, 64)
    x = torch.randn(16, 64)

    @torch.no_grad()
    def step():
        return torch.cond(x.mean() > 0, lambda t: gate(t).relu(), lambda t: up(t).tanh(), (x,))

    return step


def kv_cache_decode():
    """Greedy decoding of 12 tokens with a growing key/value cache (the cache concatenated each step,
    the next token an argmax of the last logits): the shapes grow step by step."""
    dim, heads, vocab = 64, 4, 256
    emb, qkv, out, head = nn.Embedding(vocab, dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.Linear(dim, vocab)
    prompt = torch.randint(0, vocab, (2, 16))

    @torch.no_grad()
    def step():
        tokens, keys, values = prompt, None, None
        for _ in range(12):
            h = emb(tokens)
            q, k, v = (t.unflatten(-1, (heads, -1)).transpose(1, 2) for t in qkv(h).chunk(3, -1))
            keys = k if keys is None else torch.cat([keys, k], 2)
            values = v if values is None else torch.cat([values, v], 2)
            a = F.scaled_dot_product_attention(q, keys, values, is_causal=keys.shape[2] == q.shape[2])
            logits = head(h + out(a.transpose(1, 2).flatten(2)))
            tokens = logits[:, -1:].argmax(-1)
        return tokens

    return step


def fake_quant_training():
    """Quantization-aware training (eager mode, the x86 backend): fake-quantized activations and
    weights, moving-average observers."""
    import warnings

    import torch.ao.quantization as q

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    model = nn.Sequential(q.QuantStub(), nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 14 * 14, 10),
                          q.DeQuantStub()).train()  # fmt: skip
    model.qconfig = q.get_default_qat_qconfig("x86")
    q.prepare_qat(model, inplace=True)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    return _train(model, lambda: F.cross_entropy(model(x), y))


def lbfgs_closure():
    """L-BFGS: a step re-evaluates the loss and its gradient through a closure, several times."""
    lin, x, y = nn.Linear(32, 1), torch.randn(64, 32), torch.randn(64, 1)
    opt = torch.optim.LBFGS(lin.parameters(), max_iter=4)

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(lin(x), y)
        loss.backward()
        return loss

    return lambda: opt.step(closure)


def adafactor():
    """Adafactor's factored second moments (row and column statistics of each matrix)."""
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
    x = torch.randn(32, 64)
    return _train(model, lambda: model(x).pow(2).mean(), torch.optim.Adafactor(model.parameters()))


def spectrogram():
    """An audio front end: a short-time Fourier transform, a mel projection and the inverse transform."""
    wave, window, mel = torch.randn(2, 16000, requires_grad=True), torch.hann_window(400), torch.rand(201, 40)

    def step():
        spec = torch.stft(wave, 400, 160, window=window, return_complex=True)
        feats = ((spec.abs() ** 2).transpose(1, 2) @ mel).log1p()
        back = torch.istft(spec, 400, 160, window=window, length=16000)
        (feats.mean() + back.pow(2).mean()).backward()

    return step


def nested_jagged():
    """A nested jagged tensor (a Python tensor subclass) of three sequences through linear layers,
    a layer norm and GELU, trained: its operators run again on the values it holds."""
    up, down = nn.Linear(32, 96), nn.Linear(32, 32)
    opt = torch.optim.SGD([*up.parameters(), *down.parameters()], lr=0.01)
    rows = [torch.randn(n, 32) for n in (17, 40, 9)]

    def step():
        opt.zero_grad()
        x = torch.nested.nested_tensor(rows, layout=torch.jagged)
        down(F.gelu(F.layer_norm(up(x), (96,))).chunk(3, dim=-1)[0]).values().pow(2).mean().backward()
        opt.step()

    return step


def exported_module():
    """A model exported with torch.export and run as the module it gives (its graph's aten calls)."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 4)).eval()  # fmt: skip
    x = torch.randn(2, 3, 16, 16)
    exported = torch.export.export(model, (x,)).module()
    return lambda: exported(x)


def distributions():
    """torch.distributions: a reparametrised Normal sample, a Categorical sample, log-probabilities,
    a KL divergence and an entropy, differentiated."""
    mu, logits = torch.randn(64, 8, requires_grad=True), torch.randn(64, 5, requires_grad=True)
    D = torch.distributions

    def step():
        normal, cat = D.Normal(mu, torch.ones(8)), D.Categorical(logits=logits)
        z, a = normal.rsample(), cat.sample()
        loss = D.kl_divergence(normal, D.Normal(0.0, 1.0)).sum() - normal.log_prob(z).sum() - cat.log_prob(a).sum()
        (loss - cat.entropy().sum()).backward()

    return step


def hessian_forward_mode():
    """torch.func.hessian (forward-mode jacfwd over jacrev): zero tensors of forward-mode AD and
    the checks it makes on its wrappers."""
    w, x = torch.randn(16), torch.randn(32, 16)
    return lambda: torch.func.hessian(lambda w: torch.sigmoid(x @ w).log().sum())(w)


def custom_autograd_function():
    """A Python autograd.Function with its own backward, and an exponential moving average of the
    weights (swa_utils.AveragedModel) after each step."""

    class ScaledRelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clamp(min=0) * 2

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * (x > 0) * 2

    lin, x = nn.Linear(64, 64), torch.randn(32, 64)
    ema = torch.optim.swa_utils.AveragedModel(lin, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))
    train = _train(lin, lambda: ScaledRelu.apply(lin(x)).sum())

    def step():
        train()
        ema.update_parameters(lin)

    return step


def program_generator():
    """Sampling with the program's own torch.Generator (noise, a permutation, a Bernoulli mask)."""
    g, x, p = torch.Generator().manual_seed(3), torch.randn(64, 32), torch.full((64, 32), 0.3)
    return lambda: (x + torch.randn(64, 32, generator=g))[torch.randperm(64, generator=g)] * torch.bernoulli(p, generator=g)


def mkldnn_inference():
    """A CNN converted to MKL-DNN tensors (torch.utils.mkldnn), and a frozen TorchScript one that
    optimize_for_inference runs on them."""
    from torch.utils import mkldnn

    net = mkldnn.to_mkldnn(nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3)).eval())
    frozen = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(
        nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval())))  # fmt: skip
    x = torch.randn(2, 3, 32, 32)

    def step():
        with torch.no_grad():
            return net(x.to_mkldnn()).to_dense(), frozen(x)

    return step


def complex_layer():
    """A complex-valued linear layer trained through its magnitude and phase."""
    w, x = torch.randn(32, 32, dtype=torch.cfloat, requires_grad=True), torch.randn(16, 32, 2)
    return lambda: ((torch.view_as_complex(x) @ w).abs().square().sum() + torch.angle(torch.view_as_complex(x) @ w).sum()).backward()


def vectorized_jacobian():
    """torch.autograd.functional.jacobian with vectorize=True (the legacy vmap's batch dimensions)."""
    f, x = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3)), torch.randn(6)
    return lambda: torch.autograd.functional.jacobian(f, x, vectorize=True)


def float8_casts():
    """A float8 recipe's scaled casts (e4m3 forward, e5m2 gradients) and a uint16 counter."""
    x = torch.randn(64, 64)

    def step():
        scale = x.abs().amax() / 448.0
        low, grads = (x / scale).to(torch.float8_e4m3fn), (x * 1e-3).to(torch.float8_e5m2)
        return low.float() * scale, grads.float(), torch.zeros(64, dtype=torch.uint16)

    return step


def masks_and_counts():
    """Values put by a boolean mask (image features at image tokens computed from the ids, and at
    a mask given with the batch), segments cut by given lengths, and a distillation loss over
    given log-probabilities and probabilities, over two training iterations of one trace."""
    embed, project = nn.Embedding(100, 16), nn.Linear(8, 16)
    ids, given = torch.randint(0, 90, (2, 20)), torch.zeros(2, 20, dtype=torch.bool)
    ids[:, 3:9], given[:, 10:16] = 99, True
    patches, lengths = torch.randn(12, 8), torch.tensor([5, 15, 20])
    student, teacher = torch.log_softmax(torch.randn(8, 10), 1).requires_grad_(), torch.softmax(torch.randn(8, 10), 1)
    opt = torch.optim.Adam([*embed.parameters(), *project.parameters(), student])

    def iteration():
        opt.zero_grad()
        text, feats = embed(ids), project(patches)
        merged, placed = text.clone(), text.clone()
        merged[ids == 99] = feats
        placed[given] = feats
        segments = torch.segment_reduce((merged + placed).flatten(0, 1), "mean", lengths=lengths)
        (segments.square().sum() + F.kl_div(student, teacher, reduction="batchmean")).backward()
        opt.step()

    return lambda: [iteration() for _ in range(2)]


def ppo_update():
    """A PPO update: a categorical policy's sampled actions and log-probabilities, advantages by
    generalised advantage estimation in a Python loop over 64 time steps (hundreds of 0-dim ops),
    a clipped surrogate loss, the value loss and an entropy bonus, clipped gradients."""
    pi, v = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 4)), nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    params = [*pi.parameters(), *v.parameters()]
    opt = torch.optim.Adam(params, lr=3e-4)
    obs, rew, done = torch.randn(64, 8), torch.randn(64), (torch.rand(64) < 0.05).float()

    def step():
        with torch.no_grad():
            dist = torch.distributions.Categorical(logits=pi(obs))
            act = dist.sample()
            old, val = dist.log_prob(act), v(obs).squeeze(-1)
            adv, last = torch.zeros(64), torch.tensor(0.0)
            for t in reversed(range(64)):
                after = val[t + 1] if t + 1 < 64 else torch.tensor(0.0)
                last = rew[t] + 0.99 * after * (1 - done[t]) - val[t] + 0.99 * 0.95 * (1 - done[t]) * last
                adv[t] = last
            ret, adv = adv + val, (adv - adv.mean()) / (adv.std() + 1e-8)
        d = torch.distributions.Categorical(logits=pi(obs))
        ratio = (d.log_prob(act) - old).exp()
        loss = (-torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
                + 0.5 * (v(obs).squeeze(-1) - ret).pow(2).mean() - 0.01 * d.entropy().mean())  # fmt: skip
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()

    return step


def hungarian_matching():
    """A detection loss that matches predictions to targets with SciPy's Hungarian algorithm in the
    middle of the step: the matched indices come from NumPy (tensors no operator made), then an L1
    box loss over the matches and a classification loss with a no-object class elsewhere."""
    from scipy.optimize import linear_sum_assignment

    head, x = nn.Linear(32, 14), torch.randn(2, 20, 32)
    boxes_t, classes_t = [torch.rand(5, 4), torch.rand(3, 4)], [torch.randint(0, 9, (5,)), torch.randint(0, 9, (3,))]

    def loss():
        out = head(x)
        boxes, logits, total = out[..., :4].sigmoid(), out[..., 4:], 0
        for b in range(2):
            cost = torch.cdist(boxes[b], boxes_t[b], p=1) - logits[b].softmax(-1)[:, classes_t[b]]
            i, j = (torch.as_tensor(a) for a in linear_sum_assignment(cost.detach().numpy()))
            classes = torch.full((20,), 9, dtype=torch.long)
            classes[i] = classes_t[b][j]
            total = total + F.l1_loss(boxes[b][i], boxes_t[b][j]) + F.cross_entropy(logits[b], classes)
        return total

    return _train(head, loss)


def masked_autoencoder():
    """A masked autoencoder's random masking: the patches kept are the first of an argsort of
    noise drawn in the step, gathered; the decoder's tokens restored to their places by the
    inverse permutation; the loss over the masked patches alone."""
    enc, dec, patches = nn.Linear(48, 64), nn.Linear(64, 48), torch.randn(8, 49, 48)

    def loss():
        shuffle = torch.rand(8, 49).argsort(1)
        restore = shuffle.argsort(1)
        z = enc(patches.gather(1, shuffle[:, :12].unsqueeze(-1).expand(-1, -1, 48)))
        full = torch.cat([z, torch.zeros(8, 37, 64)], 1).gather(1, restore.unsqueeze(-1).expand(-1, -1, 64))
        mask = torch.ones(8, 49)
        mask[:, :12] = 0
        mask = mask.gather(1, restore)
        return ((dec(full) - patches).pow(2).mean(-1) * mask).sum() / mask.sum()

    return _train(nn.ModuleList([enc, dec]), loss)


def vq_codebook():
    """A vector-quantised autoencoder: each code the nearest of 64 (``cdist``, ``argmin``), the
    straight-through estimator, a commitment loss, and the codebook moved by exponential moving
    averages of its assignments (``one_hot``, ``index_add_``) outside autograd."""
    enc, dec, x = nn.Linear(32, 16), nn.Linear(16, 32), torch.randn(128, 32)
    codebook = torch.randn(64, 16)
    counts, sums = torch.ones(64), codebook.clone()
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()])

    def step():
        z = enc(x)
        idx = torch.cdist(z, codebook).argmin(1)
        q = codebook[idx]
        loss = F.mse_loss(dec(z + (q - z).detach()), x) + 0.25 * F.mse_loss(z, q.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            counts.mul_(0.99).add_(F.one_hot(idx, 64).float().sum(0), alpha=0.01)
            sums.mul_(0.99).index_add_(0, idx, z.detach(), alpha=0.01)
            codebook.copy_(sums / counts.unsqueeze(1))

    return step


def beam_search():
    """Beam search over 8 positions with 4 beams: the top scores of all beams' continuations
    (``topk`` over a flattened view), each beam's source and token by division and remainder, the
    sequences and a cache reordered by ``index_select``, finished beams masked out."""
    emb, out, beams = nn.Embedding(50, 32), nn.Linear(32, 50), 4

    def step():
        with torch.no_grad():
            seqs, scores, cache = torch.zeros(beams, 1, dtype=torch.long), torch.zeros(beams), torch.zeros(beams, 0, 32)
            for _ in range(8):
                cache = torch.cat([cache, emb(seqs[:, -1]).unsqueeze(1)], 1)
                top, flat = (out(cache.mean(1)).log_softmax(-1) + scores.unsqueeze(-1)).view(-1).topk(beams)
                src, tok = torch.div(flat, 50, rounding_mode="floor"), flat % 50
                seqs = torch.cat([seqs.index_select(0, src), tok.unsqueeze(-1)], 1)
                cache = cache.index_select(0, src)
                scores = torch.where(tok == 2, torch.full_like(top, -1e9), top)
            return seqs

    return step


def optimizer_in_backward():
    """The optimizer run inside the backward pass: each parameter's own SGD steps in a hook called
    when its gradient is accumulated (``register_post_accumulate_grad_hook``), so no gradient of the
    whole model is held at once."""
    model, x = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)), torch.randn(16, 64)
    opts = {p: torch.optim.SGD([p], lr=0.01, momentum=0.9) for p in model.parameters()}

    def hook(p):
        opts[p].step()
        opts[p].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    return lambda: model(x).square().mean().backward()


def ops_that_warn():
    """Operators for which torch itself warns: an ``out=`` tensor of another shape, resized (at
    every call), and ``index_reduce_`` (in beta, once a process). The replay runs them whatever the
    warnings filters say, and lists the warnings as notes."""
    a, b, src, idx = torch.randn(16, 8), torch.randn(16, 8), torch.randn(32, 8), torch.randint(0, 16, (32,))

    def step():
        out = torch.empty(3)
        torch.mul(a, b, out=out)
        return out.sum() + a.clone().index_reduce_(0, idx, src, "amax").sum()

    return step


def program_made_tensors():
    """Tensors the step makes from its own numbers (``torch.tensor(list)``): a quantile's levels,
    a YOLO head's anchors and an image's normalisation constants, a loss's class weights and an
    infinite floor; and ragged segments cut by lengths given with the step, averaged."""
    head, x, y = nn.Conv2d(3, 6, 1), torch.rand(2, 3, 16, 16), torch.randint(0, 6, (2, 16, 16))
    lengths = torch.randint(2, 12, (16,))
    rows = torch.randn(int(lengths.sum()), 8, requires_grad=True)
    opt = torch.optim.SGD([*head.parameters(), rows], lr=0.01)

    def step():
        mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        out = head((x - mean) / std)
        anchors = torch.tensor([[10, 13], [16, 30], [33, 23]]) / 32.0
        boxes = out[:, :2].sigmoid().mean((2, 3))[:, None] * anchors
        levels = torch.quantile(out.flatten(1), torch.tensor([0.1, 0.5, 0.9]), dim=1)
        loss = F.cross_entropy(out, y, weight=torch.tensor([1.0, 2.0, 0.5, 4.0, 1.0, 1.0]))
        floor = torch.maximum(out, torch.tensor(float("-inf"))).mean()
        seg = torch.repeat_interleave(torch.arange(16), lengths)
        means = torch.zeros(16, 8).index_add_(0, seg, rows) / lengths[:, None]
        opt.zero_grad()
        (loss + boxes.sum() + levels.sum() + floor + means.square().mean()).backward()
        opt.step()

    return step


def fourier_neural_operator():
    """A Fourier neural operator's training step: real FFTs of a 2-d field, its lowest modes
    mixed by complex weights (``einsum`` over complex tensors), inverse FFTs, and Adam over the
    complex weights, whose moments it updates through ``view_as_real``."""
    spectral = nn.Parameter(torch.randn(8, 8, 6, 6, dtype=torch.cfloat) / 8)
    lift, project = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 1, 1)
    opt = torch.optim.Adam([spectral, *lift.parameters(), *project.parameters()], lr=1e-3)
    x, y = torch.randn(4, 3, 24, 24), torch.randn(4, 1, 24, 24)

    def step():
        h = lift(x)
        modes = torch.fft.rfft2(h)
        mixed = torch.zeros_like(modes)
        mixed[:, :, :6, :6] = torch.einsum("bixy,ioxy->boxy", modes[:, :, :6, :6], spectral)
        h = F.gelu(torch.fft.irfft2(mixed, s=h.shape[-2:]) + h)
        opt.zero_grad()
        F.mse_loss(project(h), y).backward()
        opt.step()

    return step


CASES = {f.__name__: f for f in (
    sparse_embedding, message_passing, sparse_adjacency, compiled, quantized_dynamic, quantized_static, quantized_pt2e,
    torchao_int8,
    torchao_float8, fft_complex, autocast_bf16, grad_scaler_fp16,
    channels_last, multihead_attention, fused_adam, foreach_adamw_clipping, data_dependent_shapes,
    upsampling_decoder, weighted_embedding_bag, packed_lstm, checkpointing, top_p_sampling, vision_ops,
    linear_algebra, bucketing, ctc_loss, causal_attention_rmsnorm, gradient_penalty, per_sample_gradients,
    reparametrized_weights, random_layers, scatter_reductions, video_cnn, recurrent_cells, order_statistics,
    interpolation_modes, loss_functions, embedding_max_norm, tensor_contractions, integer_arithmetic,
    flex_attention_eager, control_flow_cond, kv_cache_decode, fake_quant_training, lbfgs_closure, adafactor,
    spectrogram, nested_jagged, exported_module, distributions, hessian_forward_mode, custom_autograd_function,
    program_generator, mkldnn_inference, complex_layer, vectorized_jacobian, float8_casts, masks_and_counts,
    ppo_update, hungarian_matching, masked_autoencoder, vq_codebook, beam_search, optimizer_in_backward, ops_that_warn,
    program_made_tensors, fourier_neural_operator)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help=f"some of: {', '.join(CASES)}")
    args = ap.parse_args()
    unknown = set(args.cases) - set(CASES)
    if unknown:
        ap.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="features."))
    print(f"{'case':<26} {'ops':>5} {'replayed':>8} {'skipped':>7} {'notes':>5} {'runs':>4}  skip reasons")
    full = 0
    names = args.cases or list(CASES)
    for name in names:
        torch.manual_seed(0)
        path = tmp / f"{name}.json.gz"
        try:
            capture_step(CASES[name](), path, warmup=2, runs=1, min_warmup_s=0)
        except Exception as e:  # noqa: BLE001 - a feature this torch build lacks (no compiler...)
            print(f"{name:<26} not captured here: {type(e).__name__}: {str(e)[:80]}")
            continue
        replay = Replay(load_trace(path), "cpu").prepare()
        rep = replay.report
        runs = "ok"
        try:
            for _ in range(2):
                replay.reset_state()
                replay.run()
        except Exception as e:  # noqa: BLE001 - reported in the table
            runs = f"failed: {e}"[:60]
        skipped = rep.skipped_list()
        reasons = "; ".join(f"{s['count']}x {s['op']}" for s in skipped[:4]) + (f": {skipped[0]['reason'][:90]}" if skipped else "")
        full += rep.ops_skipped == 0 and runs == "ok"
        print(f"{name:<26} {rep.ops_total:>5} {rep.ops_replayed:>8} {rep.ops_skipped:>7} {len(rep.notes):>5} {runs:>4}  "
              f"{reasons}")  # fmt: skip
        for note in rep.notes:
            print(f"{'':<26} note: {note[:150]}")
    print(f"feature coverage: {full}/{len(names)} cases replay every op")
    return 0


if __name__ == "__main__":
    sys.exit(main())
