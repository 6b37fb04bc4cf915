"""Models written with PyTorch libraries outside transformers, for the model zoo
(``python benchmarks/model_zoo.py --family libraries``): each library's own way of computing, which
no other part of the project traces.

* Pyro: a variational autoencoder's ELBO (``Trace_ELBO.differentiable_loss``), its latent sampled by
  reparametrisation inside the step;
* GPyTorch: an exact Gaussian process's marginal log likelihood, by Cholesky factors (its default
  for small data) and by conjugate gradients with stochastic Lanczos quadrature (random probe
  vectors drawn inside the step, iterations decided by a tolerance);
* e3nn: an equivariant message-passing layer (spherical harmonics of the edges, a tensor product
  weighted by an MLP of the edge lengths, summed into the nodes);
* torchdiffeq: a neural ODE solved by Dormand-Prince with adaptive steps (each step's size decided
  from the last one's error, on the host);
* x-transformers: a decoder with rotary embeddings, RMS norms, gated feed-forward layers and
  residual attention;
* PEFT: LoRA adapters on a small Llama of transformers (only the adapters train);
* torch-harmonics: a spherical Fourier layer (real spherical harmonic transform, learned weights per
  degree, inverse transform);
* vector-quantize-pytorch: a codebook learnt by exponential moving averages (updated in place in the
  forward pass of a training step) with a commitment loss;
* torchmetrics: a classifier whose forward pass also computes AUROC, average precision and F1 over
  its batch (sorts, cumulative sums, bincounts);
* kornia: a CNN over images that kornia warps (an affine grid sample), blurs, converts to Lab and
  takes the Sobel edges of;
* MONAI: a 3-D UNet with residual units, trained by a Dice loss;
* pytorch-metric-learning: a triplet margin loss over the triplets a multi-similarity miner picks
  from the batch (their count follows the data);
* normflows: a neural spline flow (autoregressive rational-quadratic splines, LU permutations)
  trained by the forward KL divergence;
* torchsde: a latent SDE solved by Euler-Maruyama (Brownian increments drawn inside the step);
* botorch: candidates moved along the gradient of a GP's q-log expected improvement;
* optimizers of other libraries on a small classifier: schedule-free AdamW, Lion, torch-optimizer's
  Shampoo (preconditioners raised to -1/4 through their SVD) and LAMB;
* perceiver-pytorch: a Perceiver's cross-attention from latents to an image's Fourier-featured
  pixels;
* performer-pytorch's FAVOR+ and reformer-pytorch's LSH attention (random projections and hash
  rotations drawn in the step, buckets sorted), language models;
* st-moe-pytorch: a sparse mixture of experts with top-2 routing, capacities and auxiliary losses;
* ncps: a closed-form continuous-time (CfC) recurrent network on a neural circuit policy's wiring;
* torchcde: a neural controlled differential equation over a cubic spline of series (RK4);
* entmax: self-attention with entmax-1.5 weights (sparse, by sorting) and the entmax loss;
* geomloss: a point cloud moved along the gradient of its Sinkhorn divergence to another;
* tab-transformer-pytorch: an FT-Transformer over categorical and continuous features;
* Opacus: DP-SGD (each sample's gradient kept by the module's hooks, clipped, summed and noised);
* snntorch and spikingjelly: spiking networks of leaky integrate-and-fire neurons over time steps,
  trained through surrogate gradients (a loop of single steps; a whole sequence per call);
* mambapy: a Mamba language model whose selective scan runs as a parallel scan in PyTorch;
* pykan: a Kolmogorov-Arnold network (learned B-splines on every edge);
* torch-ema: an exponential moving average of the weights, moved after each optimizer step;
* zuko: a conditional neural spline flow, and an unconstrained monotonic flow (a network
  integrated by Gauss-Legendre quadrature);
* higher and TorchOpt: MAML over sine regression tasks, the meta-loss differentiated through
  three inner steps (SGD; TorchOpt's differentiable Adam), which the evaluation step takes too;
* TorchANI: a neural network potential trained on energies and forces (the forces a gradient taken
  with create_graph inside the step; an inference step takes them too), its neighbour list built
  in the step;
* bitsandbytes: AdamW with 8-bit blockwise states (its own operators, ``bitsandbytes::``);
* pytorch_wavelets: a denoiser over a two-level wavelet decomposition;
* nflows: a masked autoregressive flow;
* pytorch-crf: a BiLSTM-CRF tagger's likelihood (the forward algorithm over masked sentences);
* torchquad: a network fitted to integrate to 1 over a square by Simpson's rule;
* pytorch-tabnet: TabNet (sparsemax attention over features, ghost batch norms);
* auraloss: a 1-D convolutional upsampler trained by a multi-resolution STFT loss;
* pytorch-msssim: an autoencoder trained by multi-scale SSIM;
* roma: rotations projected on SO(3) by a differentiable special Procrustes (an SVD);
* rtdl_num_embeddings: an MLP over periodic embeddings of numeric features;
* julius: a speech enhancer between sinc resamplings and a low-pass filter;
* pytorch_optimizer's Muon (Newton-Schulz orthogonalised momentum for the matrices, AdamW for the
  rest), SOAP (Adam in the eigenbasis of Shampoo's preconditioners, by ``eigh`` and QR), Prodigy,
  Adan and AdEMAMix, each training the small classifier;
* TorchRec: a DLRM over an embedding-bag collection, its keyed jagged tensor built in the step from
  lengths and ids of a power law;
* geoopt: Poincare embeddings moved by Riemannian Adam on the ball;
* torchode: a batch of neural ODEs by Tsit5 with a PID step-size controller per sample;
* nnAudio: a tagger over a constant-Q transform (complex kernels as 1-D convolutions);
* torch-struct: a linear-chain CRF's log-likelihood (a parallel scan of log-semiring matrix products
  over the batch's own sequence lengths);
* tensorly: a CP decomposition by alternating least squares (inference only: no parameters);
* pytorch-minimize: a logistic regression fitted by BFGS inside the step (inference only);
* pytorch-tcn: a temporal convolutional network (dilated causal convolutions, weight norm);
* neuraloperator: a Fourier neural operator (real FFTs, complex weights on the lowest modes);
* pykeen: RotatE knowledge-graph embeddings (complex rotations) by a margin ranking loss;
* Stable-Baselines3: an actor-critic policy's PPO loss over a rollout batch;
* s5-pytorch: S5 state-space layers (a complex diagonal recurrence by an associative scan, under
  torch.func's vmap);
* local-attention: windowed causal attention with rotary positions;
* siren-pytorch: a SIREN fitting an image;
* torchcfm: flow matching over minibatch optimal-transport couplings (POT's exact plan on the host);
* brevitas: quantization-aware training (4-bit weights, 8-bit activations, straight-through
  rounding, percentile statistics by kthvalue);
* deepxde: a physics-informed network for a Poisson equation (its Laplacian by Hessians taken
  with create_graph in the step, in its evaluation too);
* memory-efficient-attention-pytorch: attention in checkpointed query and key chunks;
* nystrom-attention: a Nystromformer (landmarks, a Newton-Schulz pseudo-inverse);
* soft-moe-pytorch: a soft mixture of experts;
* mlp-mixer-pytorch: an MLP-Mixer;
* RecBole: SASRec, a sequential recommender over padded item histories whose lengths it is
  given (LightGCN is left out: it builds its graph through a SciPy internal that SciPy 1.15 dropped);
* pomegranate (1.x): a hidden Markov model's forward-backward pass (inference only);
* CTGAN: a tabular GAN's generator loss through its packed critic (Gumbel softmaxes column by column);
* xlstm: mLSTM blocks (the parallel form's causal, stabilised decay matrix);
* kymatio: a 1-D wavelet scattering transform (Morlet filters applied in the Fourier domain);
* hummingbird-ml: a scikit-learn gradient-boosted forest compiled into matrix products, and into
  a tree walk that gathers each level's next nodes (inference only);
* mace-torch: MACE, an equivariant interatomic potential trained on energies and forces (e3nn 0.4,
  its pin, loads its constants with their slices allowed);
* GluonTS (PyTorch): DeepAR's Student's t likelihood over lagged, scaled series;
* titans-pytorch: a neural memory updated by per-sample gradients (``torch.func``) chunk by chunk;
* mega-pytorch: Mega's EMA-gated attention (the EMA by FFT convolution);
* block-recurrent-transformer-pytorch: a block-recurrent language model;
* torchlibrosa: an audio tagger over its STFT and log-mel filter bank;
* ultralytics: YOLO11n trained by its task-aligned assigner's losses (a data-dependent count of
  anchors), and its inference's decoded boxes;
* segmentation-models-pytorch: a U-Net over a ResNet-18 encoder, by Dice loss and cross-entropy;
* lightly: DINO (a student against a moving-average teacher over global and local views, its
  loss's centre updated in place);
* denoising-diffusion-pytorch: Gaussian diffusion's loss over its U-Net (time steps and noise drawn
  in the step);
* efficientnet_pytorch: EfficientNet-B0, its swish an ``autograd.Function``;
* TorchRL: SAC's losses over a TensorDict batch (two Q-networks under ``vmap``, a soft update of
  their targets);
* BS-RoFormer: a band-split music source separator (STFT, axial rotary transformers, inverse STFT);
* tensorly-torch: CP-factorized convolution and linear layers;
* CoLT5-attention: a conditionally routed transformer block (heavy branches over routed tokens);
* vit-pytorch: NaViT (images of several resolutions packed into sequences, token dropout) and MaxViT
  (MBConv blocks, window and grid attention with relative position biases);
* schnetpack: a PaiNN potential trained on energies and forces (second order), over neighbour lists;
* torchkbnufft: an MRI reconstruction through its non-uniform FFTs (Kaiser-Bessel table
  interpolation, run by TorchScript functions forked over the batch);
* segment-anything: a small Segment Anything (windowed ViT encoder, prompt encoder, two-way mask
  decoder) trained by a focal and dice loss;
* timm: EVA-02 (2-D rotary positions, SwiGLU), NF-RegNet (no normalisation layers: weight-
  standardised convolutions) and EfficientFormerV2;
* open_clip: CoCa (contrastive and captioning losses, a multimodal decoder over the image's tokens);
* pytorch-widedeep: a TabTransformer beside a wide linear part, over categorical and continuous
  columns;
* enformer-pytorch: a small Enformer over one-hot DNA (attention pooling, relative positions from
  gamma features, Poisson losses);
* pypose: Levenberg-Marquardt on a pose graph of SE(3) LieTensors inside the step (Jacobians by
  ``torch.func``; inference only);
* compressai: a scale hyperprior (GDN, an entropy bottleneck, a Gaussian conditional) trained by
  rate and distortion;
* pytorch-forecasting: a Temporal Fusion Transformer over a TimeSeriesDataSet's batch (encoder
  lengths that vary: packed LSTM sequences) by a quantile loss;
* equiformer-pytorch: an SE(3)-equivariant graph attention network over a point cloud;
* galore-torch: GaLore's AdamW (gradients projected on their top singular vectors) on the small
  classifier;
* chemprop: a directed message-passing network over molecules from SMILES;
* LitGPT: its GPT in a Llama layout (grouped-query attention, partial rotary positions);
* deepwave: full-waveform inversion, its wave propagation in C through ctypes (outside PyTorch's
  operators: the time the replay cannot have, which its report names as outside operators);
* torchscale: a RetNet decoder (multi-scale retention in its parallel form);
* mup: an MLP in the maximal update parametrization (``MuReadout``, ``MuAdamW``);
* torchdyn: a neural ODE by Dormand-Prince with adaptive steps, its gradient by the adjoint method;
* MEGABYTE-pytorch: a multiscale byte-level language model (global and local transformers);
* torch-rechub: MMoE, a multi-gate mixture of experts over sparse and dense features, two tasks;
* norse: a spiking network of LIF layers over time steps, a leaky-integrator readout;
* captum: integrated gradients of a CNN's class scores (inference only; its gradients taken with
  grad mode switched on inside the no-grad step);
* speechbrain: an ECAPA-TDNN speaker embedding over filter banks of utterances of different
  lengths, trained by an additive angular margin softmax;
* demucs: Hybrid Transformer Demucs separating a stereo mixture into four sources (spectral and
  waveform branches, a cross-domain transformer);
* Vocos: a vocoder (a ConvNeXt backbone, an inverse STFT head) trained on mel spectrograms;
* asteroid: Conv-TasNet trained by permutation-invariant SI-SDR;
* diffsort: a bitonic differentiable sorting network ranking a scorer's outputs;
* fast-pytorch-kmeans: Lloyd's k-means, stopped by a tolerance (inference only);
* heavyball: PSGD with Kronecker-factored preconditioners (eager), training the small classifier;
* EnCodec: a neural audio codec (SEANet encoder and decoder, a residual vector quantizer whose
  codebooks move by moving averages), trained on the audio's L1 error and the commitment penalty;
* torchcrepe: CREPE pitch tracking with its bundled tiny model (inference only);
* BackPACK: per-sample gradients and the exact diagonal of the generalised Gauss-Newton matrix,
  computed by module hooks inside a CNN's backward pass (inference only);
* FrEIA: an invertible network of all-in-one coupling blocks trained by maximum likelihood;
* bayesian-torch: a CNN made Bayesian (weights drawn from their posteriors in every forward pass),
  trained by cross-entropy and the KL divergence;
* torchhd: OnlineHD, hypervector encoding and a single-pass update of class prototypes (inference
  only);
* torchvision's detectors: Faster R-CNN (a MobileNetV3 FPN), Mask R-CNN, RetinaNet, FCOS and
  SSDlite, trained by their own losses (anchor matching, sampled proposals, RoIAlign over the
  pyramid), and their inference with its score thresholds and NMS; and a network of deformable
  convolutions (DCNv2) whose regions are pooled by position-sensitive RoIAlign and RoI pooling.
  Their operators are torchvision's own (``torchvision::nms``, ``roi_align``, ``deform_conv2d``
  and their backward ops), which need torchvision's C library: ``pip install torch==2.14.1
  torchvision==0.29.1`` (a CUDA build of both, which runs them on the CPU), not the CPU torch;
* torchaudio's own operators: an Emformer RNN-T trained by its RNN-T loss
  (``torchaudio::rnnt_loss``), a cascade of learnt biquad filters (``lfilter``'s recursion,
  ``torchaudio::_lfilter_core_loop``, written in place sample after sample) before a classifier,
  and CTC forced alignment (``torchaudio::forced_align``, inference only). They need torchaudio's
  C library: ``pip install torch==2.9.1 torchvision==0.24.1``, then ``torchaudio==2.9.*`` (CUDA
  builds, whose operators run on the CPU; torch 2.9 is also an older release for the replay);
* torch_scatter's own operators over a batch of graphs: ``scatter_max`` and ``scatter_sum`` of
  messages into their nodes, each graph pooled over its CSR segment (``segment_mean_csr``,
  ``segment_max_csr``) and gathered back (``gather_csr``). PyPI holds its source, built for the
  torch installed (``pip install --no-build-isolation torch-scatter``, six minutes here);
* torch_sparse's own operators: a graph network over a ``SparseTensor`` adjacency, its sparse-dense
  products with sum, mean and max reductions (``spmm_sum``, ``spmm_mean``, ``spmm_max``, the
  transpose's pointers by ``ind2ptr``), built from source as torch_scatter is (nine minutes here);
* torch_cluster's own operators: PointNet++ over a batch of point clouds (farthest point sampling,
  ``torch_cluster::fps``; pairs within a radius, ``radius``, whose count the positions decide;
  features interpolated from the 3 nearest, ``knn``), a dynamic graph CNN (DGCNN: k-NN graphs in
  the features' space, ``knn``, per cloud) and node2vec's skip-gram over biased random walks
  (``random_walk``); torch_spline_conv's: SplineCNN (``spline_basis``, ``spline_weighting``). Both
  built from source as torch_scatter is (``pip install --no-build-isolation torch-cluster
  torch-spline-conv``, thirteen minutes here). PyG's own wrappers of them (``fps``,
  ``DynamicEdgeConv``, ``SplineConv``) ask for pyg-lib, which PyPI lacks: the models call the two
  libraries' functions, and PyG's ``PointNetConv`` and ``EdgeConv``.

torchkbnufft is left out: torch_geometric, which the zoo imports, replaces ``torch.index_select``
with a Python function that its TorchScript code cannot call.

``LIBRARIES[name]()`` gives ``(model, x, loss)``, or ``(model, x, loss, optimizer)``:
``model(**x)`` is one forward pass, ``loss(out)`` the training loss, and ``optimizer(parameters)``
the training step's optimizer where it is not the zoo's AdamW. Each builder imports its library (a missing one raises
ModuleNotFoundError, which the zoo reports as the original failing) and seeds torch first.

    pip install pyro-ppl gpytorch e3nn torchdiffeq x-transformers peft 'torch-harmonics<0.8' vector-quantize-pytorch \
        torchmetrics kornia monai pytorch-metric-learning normflows torchsde botorch schedulefree lion-pytorch \
        torch-optimizer perceiver-pytorch performer-pytorch reformer-pytorch st-moe-pytorch ncps torchcde entmax \
        geomloss tab-transformer-pytorch opacus snntorch spikingjelly mambapy pykan pandas torch-ema zuko higher \
        torchopt torchani bitsandbytes pytorch_wavelets PyWavelets 'setuptools<81' nflows pytorch-crf torchquad \
        pytorch-tabnet auraloss pytorch-msssim roma rtdl_num_embeddings julius pytorch_optimizer torchrec \
        fbgemm-gpu-cpu geoopt torchode nnAudio torch-struct tensorly pytorch-minimize pytorch-tcn neuraloperator \
        pykeen stable-baselines3 s5-pytorch local-attention siren-pytorch torchcfm brevitas deepxde \
        memory-efficient-attention-pytorch nystrom-attention soft-moe-pytorch mlp-mixer-pytorch recbole \
        torchfm deepctr-torch product-key-memory conformer point-transformer-pytorch egnn-pytorch \
        routing-transformer came-pytorch pomegranate ctgan xlstm kymatio hummingbird-ml mace-torch
        'gluonts[torch]' titans-pytorch mega-pytorch block-recurrent-transformer-pytorch torchlibrosa \
        ultralytics segmentation-models-pytorch lightly denoising-diffusion-pytorch efficientnet_pytorch torchrl \
        BS-RoFormer tensorly-torch CoLT5-attention vit-pytorch schnetpack torchkbnufft segment-anything \
        timm open_clip_torch pytorch-widedeep enformer-pytorch pypose compressai pytorch-forecasting \
        equiformer-pytorch galore-torch chemprop litgpt deepwave torchscale mup torchdyn MEGABYTE-pytorch \
        torch-rechub norse captum speechbrain demucs vocos asteroid diffsort fast-pytorch-kmeans heavyball \
        encodec torchcrepe backpack-for-pytorch FrEIA bayesian-torch torch-hd

(torch-harmonics 0.8 and later load a compiled extension built for one torch release; 0.7.4 is
Python only. torchvision and torchaudio from PyPI are CUDA builds that do not load beside the CPU
torch: the models here do without them, but for ultralytics, segmentation-models-pytorch,
lightly, denoising-diffusion-pytorch, vit-pytorch, timm and open_clip, which need torchvision, and
speechbrain, Vocos, asteroid, EnCodec and torchcrepe, which need torchaudio: where it is
installed, the zoo makes its Python parts importable first (``torchvision_module``,
``torchaudio_module``), and every library that imports it then imports. torchvision's own
operators still do not load there: its detectors are run in an environment of torch 2.14.1 and
torchvision 0.29.1, CUDA builds of both, whose operators run on the CPU. torchrec pulls in
fbgemm-gpu, a CUDA build: install fbgemm-gpu-cpu of torch's release in its place.)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch

nn, F = torch.nn, torch.nn.functional


def _identity(out):
    return out


def _pyro_vae():
    import pyro
    import pyro.distributions as dist

    class VAE(nn.Module):
        def __init__(self, features=64, hidden=128, latent=16):
            super().__init__()
            self.latent = latent
            self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.Softplus())
            self.loc, self.scale = nn.Linear(hidden, latent), nn.Linear(hidden, latent)
            self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.Softplus(), nn.Linear(hidden, features))
            self.elbo = pyro.infer.Trace_ELBO()

        def model(self, x):
            pyro.module("decoder", self.decoder)
            with pyro.plate("data", x.shape[0]):
                z = pyro.sample("z", dist.Normal(x.new_zeros(x.shape[0], self.latent), 1.0).to_event(1))
                pyro.sample("x", dist.Bernoulli(logits=self.decoder(z)).to_event(1), obs=x)

        def guide(self, x):
            pyro.module("encoder", self.encoder)
            h = self.encoder(x)
            with pyro.plate("data", x.shape[0]):
                pyro.sample("z", dist.Normal(self.loc(h), F.softplus(self.scale(h)) + 1e-3).to_event(1))

        def forward(self, x):
            return self.elbo.differentiable_loss(self.model, self.guide, x)

    torch.manual_seed(0)
    pyro.clear_param_store()
    return VAE(), {"x": (torch.rand(128, 64) < 0.3).float()}, _identity


def _gpytorch(solver: str):
    import gpytorch

    class GP(gpytorch.models.ExactGP):
        def __init__(self, x, y):
            super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
            self.mean = gpytorch.means.ConstantMean()
            self.covar = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=x.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean(x), self.covar(x))

    class Marginal(nn.Module):
        """The negative marginal log likelihood of the training data, as GPyTorch trains a GP."""

        def __init__(self, x, y):
            super().__init__()
            self.gp = GP(x, y)
            self.mll = gpytorch.mlls.ExactMarginalLogLikelihood(self.gp.likelihood, self.gp)
            self.cholesky = solver == "cholesky"

        def forward(self, x, y, at):
            # (GPyTorch factors matrices up to 800 rows by Cholesky; past that, or told so, by CG)
            with gpytorch.settings.max_cholesky_size(10_000 if self.cholesky else 0):
                if self.training:
                    return -self.mll(self.gp(x), y)
                with gpytorch.settings.fast_pred_var(not self.cholesky):  # (an inference: the posterior at ``at``)
                    posterior = self.gp.likelihood(self.gp(at))
                    return posterior.mean.sum() + posterior.variance.sum()

    torch.manual_seed(0)
    x = torch.rand(400, 3)
    y = torch.sin(6 * x).sum(-1) + 0.1 * torch.randn(400)
    model = Marginal(x, y)
    model.train()
    return model, {"x": x, "y": y, "at": torch.rand(100, 3)}, _identity


class _Equivariant(nn.Module):
    """One e3nn message-passing layer over a random point cloud's radius graph."""

    def __init__(self):
        super().__init__()
        o3 = _e3nn_o3()
        from e3nn.nn import FullyConnectedNet

        self.irreps_in, self.irreps_sh = o3.Irreps("8x0e + 4x1o"), o3.Irreps.spherical_harmonics(2)
        self.irreps_out = o3.Irreps("8x0e + 4x1o + 2x2e")
        self.sh = o3.SphericalHarmonics(self.irreps_sh, normalize=True, normalization="component")
        self.tp = o3.FullyConnectedTensorProduct(self.irreps_in, self.irreps_sh, self.irreps_out, shared_weights=False)
        self.radial = FullyConnectedNet([8, 32, self.tp.weight_numel], torch.nn.functional.silu)
        self.readout = o3.Linear(self.irreps_out, "1x0e")

    def forward(self, pos, feats, src, dst):
        edge = pos[dst] - pos[src]
        length = edge.norm(dim=-1, keepdim=True)
        basis = torch.cat([torch.cos(k * length) for k in range(1, 9)], dim=-1)
        messages = self.tp(feats[src], self.sh(edge), self.radial(basis))
        nodes = torch.zeros(pos.shape[0], messages.shape[1]).index_add_(0, dst, messages)
        return self.readout(nodes).sum()


def _e3nn():
    torch.manual_seed(0)
    pos = torch.randn(64, 3)
    near = (torch.cdist(pos, pos) < 1.2) & ~torch.eye(64, dtype=torch.bool)
    src, dst = near.nonzero().unbind(1)
    model = _Equivariant()
    return model, {"pos": pos, "feats": torch.randn(64, model.irreps_in.dim), "src": src, "dst": dst}, _identity


class _NeuralODE(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.field = nn.Sequential(nn.Linear(dim, 64), nn.Tanh(), nn.Linear(64, dim))

    def forward(self, y0, t, target):
        from torchdiffeq import odeint

        path = odeint(lambda _, y: self.field(y), y0, t, method="dopri5", rtol=1e-4, atol=1e-5)
        return F.mse_loss(path[-1], target)


def _torchdiffeq():
    torch.manual_seed(0)
    return _NeuralODE(), {"y0": torch.randn(32, 16), "t": torch.linspace(0, 1, 5), "target": torch.randn(32, 16)}, _identity


class _LanguageModel(nn.Module):
    """A next-token loss over a language model that returns logits (``net(ids)``)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, ids):
        return F.cross_entropy(self.net(ids[:, :-1]).transpose(1, 2), ids[:, 1:])


def _x_transformers():
    from x_transformers import Decoder, TransformerWrapper

    torch.manual_seed(0)
    model = TransformerWrapper(num_tokens=1000, max_seq_len=64, attn_layers=Decoder(
        dim=64, depth=2, heads=4, rotary_pos_emb=True, use_rmsnorm=True, ff_glu=True, residual_attn=True))  # fmt: skip
    return _LanguageModel(model), {"ids": torch.randint(0, 1000, (2, 65))}, _identity


def _peft_lora():
    import peft
    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    base = tf.LlamaForCausalLM(config)
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                      lora_dropout=0.0))  # fmt: skip
    ids = torch.randint(3, 1000, (2, 64))

    class Adapted(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, labels=ids).loss

    return Adapted(), {"ids": ids}, _identity


class _SphericalFourier(nn.Module):
    """A spherical Fourier neural operator's layer: the real SHT of a field on a 32 x 64 grid,
    its coefficients mixed across channels per degree, the inverse SHT, a pointwise skip."""

    def __init__(self, channels=8, lat=32, lon=64):
        super().__init__()
        import torch_harmonics as th

        self.sht, self.isht = th.RealSHT(lat, lon, grid="equiangular"), th.InverseRealSHT(lat, lon, grid="equiangular")
        self.weight = nn.Parameter(torch.randn(channels, channels, self.sht.lmax, dtype=torch.cfloat) / channels)
        self.skip = nn.Conv2d(channels, channels, 1)

    def forward(self, field, target):
        coeffs = self.sht(field)  # (batch, channels, degree, order)
        mixed = torch.einsum("bild,iol->bold", coeffs, self.weight)
        return F.mse_loss(F.gelu(self.isht(mixed) + self.skip(field)), target)


def _torch_harmonics():
    torch.manual_seed(0)
    return _SphericalFourier(), {"field": torch.randn(4, 8, 32, 64), "target": torch.randn(4, 8, 32, 64)}, _identity


def _vector_quantize():
    from vector_quantize_pytorch import VectorQuantize

    class Autoencoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.encode, self.decode = nn.Linear(32, 64), nn.Linear(64, 32)
            self.vq = VectorQuantize(dim=64, codebook_size=256, decay=0.8, commitment_weight=1.0)

        def forward(self, x):
            quantized, _, commitment = self.vq(self.encode(x))
            return F.mse_loss(self.decode(quantized), x) + commitment.sum()

    torch.manual_seed(0)
    return Autoencoder(), {"x": torch.randn(8, 128, 32)}, _identity


class _ScoredClassifier(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.classes = classes
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x, y):
        from torchmetrics.functional import classification as m

        logits = self.net(x)
        with torch.no_grad():
            probs = logits.softmax(-1)
            self.scores = (m.multiclass_auroc(probs, y, self.classes), m.multiclass_average_precision(probs, y, self.classes),
                           m.multiclass_f1_score(probs, y, self.classes))  # fmt: skip
        return F.cross_entropy(logits, y)


def _torchmetrics():
    torch.manual_seed(0)
    return _ScoredClassifier(), {"x": torch.randn(512, 32), "y": torch.randint(0, 10, (512,))}, _identity


def _kornia():
    import kornia

    class Augmented(nn.Module):
        """A CNN over images that kornia warps, blurs, converts to Lab and takes the edges of."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(5, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                                     nn.Linear(256, 10))  # fmt: skip

        def forward(self, images, turn, labels):
            h, w = images.shape[-2:]
            warped = kornia.geometry.transform.warp_affine(images, turn, (h, w), align_corners=False)
            lab = kornia.color.rgb_to_lab(kornia.filters.gaussian_blur2d(warped, (5, 5), (1.5, 1.5)))
            edges = kornia.filters.sobel(kornia.color.rgb_to_grayscale(warped))
            return F.cross_entropy(self.net(torch.cat([lab / 100, edges, warped.mean(1, keepdim=True)], 1)), labels)

    torch.manual_seed(0)
    angle = torch.full((8,), 15.0)
    turn = kornia.geometry.transform.get_rotation_matrix2d(torch.full((8, 2), 32.0), angle, torch.ones(8, 2))
    return Augmented(), {"images": torch.rand(8, 3, 64, 64), "turn": turn, "labels": torch.randint(0, 10, (8,))}, _identity


def _monai():
    from monai.losses import DiceLoss
    from monai.networks.nets import UNet

    class Segmenter(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32), strides=(2, 2),
                            num_res_units=1)  # fmt: skip
            self.dice = DiceLoss(to_onehot_y=True, softmax=True)

        def forward(self, volume, mask):
            return self.dice(self.net(volume), mask)

    torch.manual_seed(0)
    return Segmenter(), {"volume": torch.randn(2, 1, 32, 32, 32), "mask": torch.randint(0, 2, (2, 1, 32, 32, 32))}, _identity


def _metric_learning():
    from pytorch_metric_learning import losses, miners

    class Embedder(nn.Module):
        """Embeddings trained by a triplet loss over the hard triplets a miner picks from the batch."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
            self.miner, self.loss = miners.MultiSimilarityMiner(epsilon=0.1), losses.TripletMarginLoss(margin=0.2)

        def forward(self, x, labels):
            emb = self.net(x)
            return self.loss(emb, labels, self.miner(emb, labels))

    torch.manual_seed(0)
    return Embedder(), {"x": torch.randn(128, 64), "labels": torch.randint(0, 8, (128,))}, _identity


def _normflows():
    import normflows as nf

    torch.manual_seed(0)
    flows = [f for _ in range(4) for f in (nf.flows.AutoregressiveRationalQuadraticSpline(4, 2, 32), nf.flows.LULinearPermute(4))]
    flow = nf.NormalizingFlow(nf.distributions.DiagGaussian(4, trainable=False), flows)

    class Density(nn.Module):
        def __init__(self):
            super().__init__()
            self.flow = flow

        def forward(self, x):
            return self.flow.forward_kld(x)

    return Density(), {"x": torch.randn(256, 4) * torch.tensor([1.0, 0.5, 2.0, 1.0])}, _identity


class _LatentSDE(nn.Module):
    noise_type, sde_type = "diagonal", "ito"

    def __init__(self, dim=8):
        super().__init__()
        self.drift, self.diffusion = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, dim)), nn.Linear(dim, dim)

    def f(self, t, y):
        return self.drift(y)

    def g(self, t, y):
        return torch.sigmoid(self.diffusion(y)) * 0.2

    def forward(self, y0, target):
        import torchsde

        path = torchsde.sdeint(self, y0, torch.linspace(0, 1, 4), method="euler", dt=0.05)
        return F.mse_loss(path[-1], target)


def _torchsde():
    torch.manual_seed(0)
    return _LatentSDE(), {"y0": torch.randn(32, 8), "target": torch.randn(32, 8)}, _identity


def _botorch():
    from botorch.acquisition.logei import qLogExpectedImprovement
    from botorch.models import SingleTaskGP

    torch.manual_seed(0)
    x = torch.rand(20, 3, dtype=torch.float64)
    gp = SingleTaskGP(x, (torch.sin(6 * x).sum(-1, keepdim=True)), outcome_transform=None)
    gp.eval()

    class Acquisition(nn.Module):
        """Candidates moved by gradient ascent on a GP's q-log expected improvement (a Monte Carlo
        estimate over the posterior at the candidates), as botorch's optimize_acqf does."""

        def __init__(self):
            super().__init__()
            self.candidates = nn.Parameter(torch.rand(16, 2, 3, dtype=torch.float64))
            self.acq = qLogExpectedImprovement(gp, best_f=gp.train_targets.max())

        def forward(self):
            return -self.acq(self.candidates.clamp(0, 1)).sum()

    return Acquisition(), {}, _identity


class _Classified(nn.Module):
    """A classification loss over a network that returns logits (``net(x)``)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, labels):
        return F.cross_entropy(self.net(x), labels)


def _classifier():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))
    return _Classified(model), {"x": torch.randn(64, 64), "labels": torch.randint(0, 10, (64,))}, _identity


def _with_optimizer(make):
    """A classifier trained by the optimizer ``make(parameters)`` gives."""

    def build():
        return (*_classifier(), make)

    return build


def _schedule_free(params):
    import schedulefree

    opt = schedulefree.AdamWScheduleFree(params, lr=1e-3, warmup_steps=10)
    opt.train()  # (its training mode: the parameters at the interpolated point)
    return opt


def _lion(params):
    from lion_pytorch import Lion

    return Lion(params, lr=1e-4, weight_decay=1e-2)


def _shampoo(params):
    import torch_optimizer

    return torch_optimizer.Shampoo(params, lr=1e-3, update_freq=1)


def _lamb(params):
    import torch_optimizer

    return torch_optimizer.Lamb(params, lr=1e-3)


def _perceiver():
    from perceiver_pytorch import Perceiver

    torch.manual_seed(0)
    net = Perceiver(input_channels=3, input_axis=2, num_freq_bands=4, max_freq=10.0, depth=2, num_latents=32,
                    latent_dim=64, cross_heads=1, latent_heads=4, cross_dim_head=16, latent_dim_head=16,
                    num_classes=10, attn_dropout=0.0, ff_dropout=0.0, weight_tie_layers=False)  # fmt: skip
    return _Classified(net), {"x": torch.randn(4, 32, 32, 3), "labels": torch.randint(0, 10, (4,))}, _identity


def _performer():
    from performer_pytorch import PerformerLM

    torch.manual_seed(0)
    net = PerformerLM(num_tokens=1000, max_seq_len=128, dim=64, depth=2, heads=4, causal=True,
                      feature_redraw_interval=100_000)  # fmt: skip
    return _LanguageModel(net), {"ids": torch.randint(0, 1000, (2, 129))}, _identity


def _reformer():
    from reformer_pytorch import ReformerLM

    torch.manual_seed(0)
    net = ReformerLM(num_tokens=1000, dim=64, depth=2, max_seq_len=128, heads=4, bucket_size=16, n_hashes=2,
                     causal=True, lsh_dropout=0.0)  # fmt: skip
    return _LanguageModel(net), {"ids": torch.randint(0, 1000, (2, 129))}, _identity


def _st_moe():
    from st_moe_pytorch import MoE

    class Experts(nn.Module):
        """A sparse mixture of experts (top-2 routing with capacities) and its auxiliary losses."""

        def __init__(self):
            super().__init__()
            self.moe = MoE(dim=64, num_experts=8, gating_top_n=2, threshold_train=0.2, threshold_eval=0.2,
                           capacity_factor_train=1.25, capacity_factor_eval=2.0)  # fmt: skip

        def forward(self, x):
            out, aux, *_ = self.moe(x)
            return out.square().mean() + aux

    torch.manual_seed(0)
    return Experts(), {"x": torch.randn(4, 64, 64)}, _identity


def _ncps():
    from ncps.torch import CfC
    from ncps.wirings import AutoNCP

    class Liquid(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = CfC(20, AutoNCP(28, 4), batch_first=True)

        def forward(self, x, target):
            out, _ = self.rnn(x)
            return F.mse_loss(out, target)

    torch.manual_seed(0)
    return Liquid(), {"x": torch.randn(8, 32, 20), "target": torch.randn(8, 32, 4)}, _identity


class _NeuralCDE(nn.Module):
    """A neural controlled differential equation over a cubic spline of irregular series."""

    def __init__(self, channels=4, hidden=16):
        super().__init__()
        self.hidden, self.channels = hidden, channels
        self.initial = nn.Linear(channels, hidden)
        self.field = nn.Sequential(nn.Linear(hidden, 64), nn.Tanh(), nn.Linear(64, hidden * channels), nn.Tanh())
        self.readout = nn.Linear(hidden, 1)

    def forward(self, series, target):
        import torchcde

        path = torchcde.CubicSpline(torchcde.hermite_cubic_coefficients_with_backward_differences(series))
        z = torchcde.cdeint(X=path, func=lambda t, z: self.field(z).view(-1, self.hidden, self.channels),
                            z0=self.initial(path.evaluate(path.interval[0])), t=path.interval, method="rk4",
                            options={"step_size": 0.25})  # fmt: skip
        return F.mse_loss(self.readout(z[:, -1]).squeeze(-1), target)


def _torchcde():
    torch.manual_seed(0)
    series = torch.cat([torch.linspace(0, 1, 16).expand(16, 16).unsqueeze(-1), torch.randn(16, 16, 3).cumsum(1)], -1)
    return _NeuralCDE(), {"series": series, "target": torch.randn(16)}, _identity


def _entmax():
    from entmax import Entmax15Loss, entmax15

    class SparseAttention(nn.Module):
        """Self-attention whose weights are entmax-1.5 (sparse, by a sort of each row), and a
        classifier trained by the entmax loss."""

        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(32, 96), nn.Linear(32, 10)
            self.loss = Entmax15Loss()

        def forward(self, x, labels):
            q, k, v = self.qkv(x).chunk(3, -1)
            mixed = entmax15(q @ k.transpose(1, 2) / 32**0.5, dim=-1) @ v
            return self.loss(self.out(mixed.mean(1)), labels)

    torch.manual_seed(0)
    return SparseAttention(), {"x": torch.randn(16, 48, 32), "labels": torch.randint(0, 10, (16,))}, _identity


def _geomloss():
    from geomloss import SamplesLoss

    class Transport(nn.Module):
        """A point cloud moved along the gradient of its Sinkhorn divergence to another (the
        tensorized backend: log-sum-exp over all pairs, with epsilon-scaling)."""

        def __init__(self):
            super().__init__()
            self.points = nn.Parameter(torch.randn(300, 2))
            self.loss = SamplesLoss("sinkhorn", p=2, blur=0.05, backend="tensorized")

        def forward(self, target):
            return self.loss(self.points, target)

    torch.manual_seed(0)
    return Transport(), {"target": torch.randn(400, 2) * 0.5 + 1.0}, _identity


def _ft_transformer():
    from tab_transformer_pytorch import FTTransformer

    class Tabular(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = FTTransformer(categories=(10, 5, 6, 5, 8), num_continuous=10, dim=32, dim_out=1, depth=2,
                                     heads=4, attn_dropout=0.0, ff_dropout=0.0)  # fmt: skip

        def forward(self, categ, cont, target):
            return F.binary_cross_entropy_with_logits(self.net(categ, cont).squeeze(-1), target)

    torch.manual_seed(0)
    categ = torch.stack([torch.randint(0, n, (64,)) for n in (10, 5, 6, 5, 8)], 1)
    return Tabular(), {"categ": categ, "cont": torch.randn(64, 10), "target": torch.rand(64).round()}, _identity


def _opacus():
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(),
                        nn.Flatten(), nn.Linear(16 * 6 * 6, 10))  # fmt: skip
    model = GradSampleModule(_Classified(net))  # (its hooks keep each sample's gradient)

    def optimizer(params):
        return DPOptimizer(torch.optim.SGD(params, lr=0.05), noise_multiplier=1.0, max_grad_norm=1.0,
                           expected_batch_size=32)  # fmt: skip

    return model, {"x": torch.randn(32, 1, 16, 16), "labels": torch.randint(0, 10, (32,))}, _identity, optimizer


def _snntorch():
    import snntorch as snn
    from snntorch import functional as SF
    from snntorch import surrogate

    class Spiking(nn.Module):
        """A convolutional spiking network over 16 time steps: leaky integrate-and-fire neurons
        (membranes carried from step to step, reset by subtraction) with a fast-sigmoid surrogate
        gradient, trained by the cross-entropy of its spike counts."""

        def __init__(self, steps=16):
            super().__init__()
            grad = surrogate.fast_sigmoid(slope=25)
            self.steps = steps
            self.conv1, self.lif1 = nn.Conv2d(1, 8, 5), snn.Leaky(beta=0.9, spike_grad=grad)
            self.conv2, self.lif2 = nn.Conv2d(8, 16, 5), snn.Leaky(beta=0.9, spike_grad=grad)
            self.fc, self.lif3 = nn.Linear(16 * 4 * 4, 10), snn.Leaky(beta=0.9, spike_grad=grad)
            self.loss = SF.ce_rate_loss()

        def forward(self, x, labels):
            mem1, mem2, mem3 = self.lif1.init_leaky(), self.lif2.init_leaky(), self.lif3.init_leaky()
            spikes = []
            for _ in range(self.steps):
                s1, mem1 = self.lif1(F.max_pool2d(self.conv1(x), 2), mem1)
                s2, mem2 = self.lif2(F.max_pool2d(self.conv2(s1), 2), mem2)
                s3, mem3 = self.lif3(self.fc(s2.flatten(1)), mem3)
                spikes.append(s3)
            return self.loss(torch.stack(spikes), labels)

    torch.manual_seed(0)
    return Spiking(), {"x": torch.rand(16, 1, 28, 28), "labels": torch.randint(0, 10, (16,))}, _identity


def _spikingjelly():
    from spikingjelly.activation_based import functional, layer, neuron, surrogate

    class MultiStep(nn.Module):
        """spikingjelly's multi-step LIF neurons (a whole sequence per call, hard reset, an arctan
        surrogate gradient) over a sequence of 8 frames; its states reset after each step."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(layer.Conv2d(2, 16, 3, padding=1), layer.BatchNorm2d(16),
                                     neuron.LIFNode(surrogate_function=surrogate.ATan()), layer.MaxPool2d(2),
                                     layer.Flatten(), layer.Linear(16 * 8 * 8, 10),
                                     neuron.LIFNode(surrogate_function=surrogate.ATan()))  # fmt: skip
            functional.set_step_mode(self.net, "m")

        def forward(self, frames, labels):
            rate = self.net(frames).mean(0)
            functional.reset_net(self.net)
            return F.mse_loss(rate, F.one_hot(labels, 10).float())

    torch.manual_seed(0)
    return MultiStep(), {"frames": torch.rand(8, 8, 2, 16, 16).round(), "labels": torch.randint(0, 10, (8,))}, _identity


def _mambapy():
    from mambapy.mamba import Mamba, MambaConfig

    class Selective(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Embedding(1000, 64), nn.Linear(64, 1000)
            self.mamba = Mamba(MambaConfig(d_model=64, n_layers=2, pscan=True))

        def forward(self, ids):
            return self.head(self.mamba(self.embed(ids)))

    torch.manual_seed(0)
    return _LanguageModel(Selective()), {"ids": torch.randint(0, 1000, (4, 65))}, _identity


def _pykan():
    from kan import KAN

    class Regression(nn.Module):
        def __init__(self):
            super().__init__()
            self.kan = KAN(width=[6, 12, 12, 1], grid=8, k=3, seed=0, save_act=False, symbolic_enabled=False,
                           auto_save=False)  # fmt: skip

        def forward(self, x, target):
            return F.mse_loss(self.kan(x).squeeze(-1), target)

    torch.manual_seed(0)
    x = torch.rand(256, 6) * 2 - 1
    return Regression(), {"x": x, "target": torch.sin(3 * x[:, 0]) * x[:, 1] + x[:, 2:].square().sum(1)}, _identity


class _AveragedOptimizer:
    """An optimizer whose step also moves torch-ema's exponential moving average of the weights."""

    def __init__(self, params):
        from torch_ema import ExponentialMovingAverage

        params = list(params)
        self.inner = torch.optim.AdamW(params, lr=1e-3)
        self.ema = ExponentialMovingAverage(params, decay=0.999)

    def zero_grad(self):
        self.inner.zero_grad()

    def step(self):
        self.inner.step()
        self.ema.update()


def _zuko():
    import zuko

    class Flow(nn.Module):
        """A conditional neural spline flow's negative log-likelihood."""

        def __init__(self):
            super().__init__()
            self.flow = zuko.flows.NSF(features=4, context=3, transforms=3, hidden_features=(64, 64))

        def forward(self, x, c):
            return -self.flow(c).log_prob(x).mean()

    torch.manual_seed(0)
    return Flow(), {"x": torch.randn(128, 4), "c": torch.randn(128, 3)}, _identity


def _zuko_unaf():
    import zuko

    class Monotonic(nn.Module):
        """An unconstrained monotonic neural flow: each transform integrates a positive network by
        Gauss-Legendre quadrature."""

        def __init__(self):
            super().__init__()
            self.flow = zuko.flows.UNAF(features=3, transforms=2, hidden_features=(32, 32))

        def forward(self, x):
            return -self.flow().log_prob(x).mean()

    torch.manual_seed(0)
    return Monotonic(), {"x": torch.randn(64, 3)}, _identity


class _Tasks(nn.Module):
    """MAML's meta-loss over 4 regression tasks: ``adapt(net, support, query)`` takes 3
    differentiable inner steps on a task's ``support(model)`` loss and gives the adapted model's
    ``query(model)`` loss; the outer backward goes through the inner steps (second order)."""

    def __init__(self, adapt):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
        self.adapt = adapt

    def forward(self, support_x, support_y, query_x, query_y):
        total = 0
        with torch.enable_grad():
            for sx, sy, qx, qy in zip(support_x, support_y, query_x, query_y):
                total = total + self.adapt(self.net, lambda model, x=sx, y=sy: F.mse_loss(model(x), y),
                                           lambda model, x=qx, y=qy: F.mse_loss(model(x), y))  # fmt: skip
        return total / len(support_x)


def _sines():
    amplitude, phase = torch.rand(4, 1, 1) * 4.5 + 0.5, torch.rand(4, 1, 1) * 3.14
    sx, qx = torch.rand(4, 10, 1) * 10 - 5, torch.rand(4, 10, 1) * 10 - 5
    return {"support_x": sx, "support_y": amplitude * torch.sin(sx + phase), "query_x": qx,
            "query_y": amplitude * torch.sin(qx + phase)}  # fmt: skip


def _higher_maml():
    import higher

    def adapt(net, support, query):
        inner = torch.optim.SGD(net.parameters(), lr=0.01)
        with higher.innerloop_ctx(net, inner, copy_initial_weights=False) as (fnet, diffopt):
            for _ in range(3):
                diffopt.step(support(fnet))
            return query(fnet)

    torch.manual_seed(0)
    return _Tasks(adapt), _sines(), _identity


def _torchopt_maml():
    import torchopt

    def adapt(net, support, query):
        start = torchopt.extract_state_dict(net)
        inner = torchopt.MetaAdam(net, lr=0.01)  # (it puts the stepped tensors in the parameters' place)
        for _ in range(3):
            inner.step(support(net))
        loss = query(net)
        torchopt.recover_state_dict(net, start)
        return loss

    torch.manual_seed(0)
    return _Tasks(adapt), _sines(), _identity


def _torchani():
    import torchani.aev
    import torchani.nn

    class Potential(nn.Module):
        """An ANI neural network potential trained on energies and forces: the forces are the
        negative gradient of the energy with respect to the coordinates, taken with create_graph
        inside the step, so that the loss's backward goes through that gradient (second order).
        An inference step takes the forces too, as a simulation does (grad mode on inside it)."""

        def __init__(self):
            super().__init__()
            self.aev = torchani.aev.AEVComputer("ani1x", "ani1x", num_species=4)
            self.nets = torchani.nn.ANINetworks({s: torchani.nn.AtomicNetwork(layer_dims=(384, 64, 32, 1)) for s in "HCNO"})

        def forward(self, species, coords, energy, forces):
            with torch.enable_grad():
                coords = coords.detach().requires_grad_()
                predicted = self.nets(species, self.aev(species, coords))
                force = -torch.autograd.grad(predicted.sum(), coords, create_graph=self.training)[0]
                return F.mse_loss(predicted, energy) + F.mse_loss(force, forces)

    torch.manual_seed(0)
    species = torch.randint(0, 4, (8, 12))
    return Potential(), {"species": species, "coords": torch.randn(8, 12, 3) * 1.5, "energy": torch.randn(8),
                         "forces": torch.randn(8, 12, 3)}, _identity  # fmt: skip


def _adamw_8bit(params):
    import bitsandbytes as bnb

    return bnb.optim.AdamW8bit(params, lr=1e-3, min_8bit_size=1024)  # (8-bit blockwise states for the larger tensors)


def _wavelets():
    from pytorch_wavelets import DWTForward, DWTInverse

    class WaveletDenoiser(nn.Module):
        """A denoiser that works on a two-level Daubechies wavelet decomposition (convolutions with
        the filters, symmetric padding) and transforms back."""

        def __init__(self):
            super().__init__()
            self.dwt, self.idwt = DWTForward(J=2, wave="db3", mode="symmetric"), DWTInverse(wave="db3", mode="symmetric")
            self.low = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 3, 3, padding=1))

        def forward(self, noisy, clean):
            low, high = self.dwt(noisy)
            high = [h * torch.sigmoid(h.abs() - 0.1) for h in high]  # (a soft shrinkage of the details)
            return F.mse_loss(self.idwt((low + self.low(low), high)), clean)

    torch.manual_seed(0)
    clean = torch.rand(4, 3, 64, 64)
    return WaveletDenoiser(), {"noisy": clean + 0.1 * torch.randn_like(clean), "clean": clean}, _identity


def _nflows():
    from nflows.distributions.normal import StandardNormal
    from nflows.flows.base import Flow
    from nflows.transforms.autoregressive import MaskedAffineAutoregressiveTransform
    from nflows.transforms.base import CompositeTransform
    from nflows.transforms.permutations import ReversePermutation

    class MAF(nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for _ in range(4):
                layers += [ReversePermutation(features=6), MaskedAffineAutoregressiveTransform(features=6, hidden_features=64)]
            self.flow = Flow(CompositeTransform(layers), StandardNormal(shape=[6]))

        def forward(self, x):
            return -self.flow.log_prob(x).mean()

    torch.manual_seed(0)
    return MAF(), {"x": torch.randn(256, 6) @ torch.randn(6, 6)}, _identity


def _crf():
    from torchcrf import CRF

    class Tagger(nn.Module):
        """A BiLSTM-CRF tagger's negative log-likelihood: the CRF's forward algorithm (a
        log-sum-exp over the tags at each position, masked by each sentence's length)."""

        def __init__(self):
            super().__init__()
            self.embed, self.lstm = nn.Embedding(2000, 64), nn.LSTM(64, 64, batch_first=True, bidirectional=True)
            self.emit, self.crf = nn.Linear(128, 9), CRF(9, batch_first=True)

        def forward(self, ids, tags, mask):
            return -self.crf(self.emit(self.lstm(self.embed(ids))[0]), tags, mask=mask, reduction="mean")

    torch.manual_seed(0)
    lengths = torch.randint(8, 33, (16,))
    lengths[0] = 32
    mask = torch.arange(32) < lengths[:, None]
    return Tagger(), {"ids": torch.randint(0, 2000, (16, 32)), "tags": torch.randint(0, 9, (16, 32)), "mask": mask}, _identity


def _torchquad():
    import torchquad

    class Integrated(nn.Module):
        """A network fitted so that its integral over the unit square (Simpson's rule on a
        33 x 33 grid) is 1 and it matches samples."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 1))
            self.rule = torchquad.Simpson()

        def forward(self, x, y):
            total = self.rule.integrate(lambda p: self.net(p).squeeze(-1), dim=2, N=1089,
                                        integration_domain=[[0.0, 1.0], [0.0, 1.0]])  # fmt: skip
            return (total - 1).square() + F.mse_loss(self.net(x).squeeze(-1), y)

    torch.manual_seed(0)
    x = torch.rand(128, 2)
    return Integrated(), {"x": x, "y": torch.exp(-((x - 0.5) ** 2).sum(1) * 8)}, _identity


def _tabnet():
    from pytorch_tabnet.tab_network import TabNet
    from pytorch_tabnet.utils import create_group_matrix

    class Tabular(nn.Module):
        """TabNet: sequential attention over features by sparsemax masks, ghost batch norms over
        virtual batches of 64, and its sparsity loss."""

        def __init__(self):
            super().__init__()
            self.net = TabNet(input_dim=24, output_dim=3, n_d=16, n_a=16, n_steps=3, virtual_batch_size=64,
                              cat_idxs=[0, 1], cat_dims=[10, 7], cat_emb_dim=[3, 3],
                              group_attention_matrix=create_group_matrix([], 24))  # fmt: skip

        def forward(self, x, labels):
            logits, sparsity = self.net(x)
            return F.cross_entropy(logits, labels) + 1e-3 * sparsity

    torch.manual_seed(0)
    x = torch.randn(256, 24)
    x[:, 0], x[:, 1] = torch.randint(0, 10, (256,)).float(), torch.randint(0, 7, (256,)).float()
    return Tabular(), {"x": x, "labels": torch.randint(0, 3, (256,))}, _identity


def _auraloss():
    import auraloss

    class Vocoder(nn.Module):
        """A small 1-D convolutional upsampler from mel-like frames to a waveform, trained by a
        multi-resolution STFT loss (three window sizes: spectral convergence and log magnitudes)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv1d(32, 64, 7, padding=3), nn.LeakyReLU(0.1),
                                     nn.ConvTranspose1d(64, 32, 16, stride=8, padding=4), nn.LeakyReLU(0.1),
                                     nn.ConvTranspose1d(32, 1, 16, stride=8, padding=4), nn.Tanh())  # fmt: skip
            self.loss = auraloss.freq.MultiResolutionSTFTLoss(fft_sizes=[256, 512, 128], hop_sizes=[64, 128, 32],
                                                              win_lengths=[256, 512, 128])  # fmt: skip

        def forward(self, frames, audio):
            return self.loss(self.net(frames), audio)

    torch.manual_seed(0)
    return Vocoder(), {"frames": torch.randn(4, 32, 64), "audio": torch.randn(4, 1, 4096) * 0.3}, _identity


def _msssim():
    from pytorch_msssim import ms_ssim

    class Autoencoder(nn.Module):
        """An image autoencoder trained by multi-scale SSIM (Gaussian windows as grouped
        convolutions, five scales of average pooling)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                     nn.ConvTranspose2d(16, 3, 4, stride=2, padding=1), nn.Sigmoid())  # fmt: skip

        def forward(self, images):
            return 1 - ms_ssim(self.net(images), images, data_range=1.0, win_size=7)

    torch.manual_seed(0)
    return Autoencoder(), {"images": torch.rand(2, 3, 112, 112)}, _identity


def _roma():
    import roma

    class Pose(nn.Module):
        """Rotations regressed as 3 x 3 matrices, projected on SO(3) by roma's special Procrustes
        (an SVD, differentiated through), and scored by their geodesic distance to the targets."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 9))

        def forward(self, features, target):
            rotation = roma.special_procrustes(self.net(features).view(-1, 3, 3))
            return roma.rotmat_geodesic_distance(rotation, target).mean()

    torch.manual_seed(0)
    return Pose(), {"features": torch.randn(64, 32), "target": roma.random_rotmat(64)}, _identity


def _periodic_embeddings():
    from rtdl_num_embeddings import PeriodicEmbeddings

    class Regression(nn.Module):
        """An MLP over periodic embeddings of numeric features (learned frequencies, sines and
        cosines, a linear layer per feature)."""

        def __init__(self):
            super().__init__()
            self.embed = PeriodicEmbeddings(12, d_embedding=16, lite=False)
            self.mlp = nn.Sequential(nn.Linear(12 * 16, 128), nn.ReLU(), nn.Linear(128, 1))

        def forward(self, x, y):
            return F.mse_loss(self.mlp(self.embed(x).flatten(1)).squeeze(-1), y)

    torch.manual_seed(0)
    x = torch.randn(256, 12)
    return Regression(), {"x": x, "y": x[:, 0].sin() + x[:, 1] * x[:, 2]}, _identity


def _julius():
    import julius

    class Bandwidth(nn.Module):
        """A speech enhancer that works at 8 kHz: the input resampled from 16 kHz by windowed
        sinc filters, a convolutional net, resampled back, then low-passed."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv1d(1, 16, 9, padding=4), nn.GELU(), nn.Conv1d(16, 1, 9, padding=4))
            self.lowpass = julius.LowPassFilter(0.45)

        def forward(self, audio, clean):
            low = julius.resample_frac(audio, 16000, 8000)
            back = julius.resample_frac(low + self.net(low), 8000, 16000, output_length=audio.shape[-1])
            return F.l1_loss(self.lowpass(back), clean)

    torch.manual_seed(0)
    clean = torch.randn(4, 1, 8000) * 0.2
    return Bandwidth(), {"audio": clean + 0.05 * torch.randn_like(clean), "clean": clean}, _identity


def _muon(params):
    import pytorch_optimizer

    params = list(params)
    return pytorch_optimizer.Muon([{"params": [p for p in params if p.ndim == 2], "use_muon": True},
                                   {"params": [p for p in params if p.ndim != 2], "use_muon": False}], lr=0.02)  # fmt: skip


def _soap(params):
    import pytorch_optimizer

    return pytorch_optimizer.SOAP(params, lr=3e-3, precondition_frequency=1)


def _prodigy(params):
    import pytorch_optimizer

    return pytorch_optimizer.Prodigy(params, lr=1.0)


def _adan(params):
    import pytorch_optimizer

    return pytorch_optimizer.Adan(params, lr=1e-3)


def _ademamix(params):
    import pytorch_optimizer

    return pytorch_optimizer.AdEMAMix(params, lr=1e-3)


def _torchrec_dlrm():
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.models.dlrm import DLRM

    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=16, num_embeddings=n, feature_names=[f"f{i}"])
              for i, n in enumerate((1000, 5000, 200))]

    class Ctr(nn.Module):
        """TorchRec's DLRM: an embedding-bag collection over three sparse features (a keyed jagged
        tensor built in the step from its lengths and ids), a dense MLP, their pairwise dot
        interactions and an over-arch MLP, trained by binary cross-entropy on clicks."""

        def __init__(self):
            super().__init__()
            self.dlrm = DLRM(EmbeddingBagCollection(tables=tables), dense_in_features=13,
                             dense_arch_layer_sizes=[64, 16], over_arch_layer_sizes=[64, 1])

        def forward(self, dense, lengths, ids, clicks):
            sparse = KeyedJaggedTensor.from_lengths_sync(keys=["f0", "f1", "f2"], values=ids, lengths=lengths)
            return F.binary_cross_entropy_with_logits(self.dlrm(dense, sparse).squeeze(-1), clicks)

    torch.manual_seed(0)
    batch = 128
    lengths = torch.randint(1, 6, (3 * batch,))
    sizes = [lengths[i * batch:(i + 1) * batch].sum().item() for i in range(3)]
    # ids by a power law over each table's rows (a few rows hot, as a recommender's are)
    ids = torch.cat([(torch.rand(s) ** 3 * n).long() for s, n in zip(sizes, (1000, 5000, 200))])
    x = {"dense": torch.randn(batch, 13), "lengths": lengths, "ids": ids, "clicks": torch.randint(0, 2, (batch,)).float()}
    return Ctr(), x, _identity


def _geoopt_poincare():
    import geoopt

    class Hierarchy(nn.Module):
        """Poincare embeddings of a tree's nodes (a ball manifold's parameter), trained by the
        negative-sampling loss over hyperbolic distances; geoopt's Riemannian Adam moves them
        along the ball (the gradient rescaled by the metric, a retraction by the exponential map)."""

        def __init__(self):
            super().__init__()
            ball = geoopt.PoincareBall()
            self.points = geoopt.ManifoldParameter(ball.random_normal(500, 10, std=1e-2), manifold=ball)

        def forward(self, pairs):
            u, v = self.points[pairs[:, :1]], self.points[pairs[:, 1:]]
            distances = self.points.manifold.dist(u, v)
            return F.cross_entropy(-distances, torch.zeros(len(pairs), dtype=torch.long))

    torch.manual_seed(0)
    pairs = torch.randint(0, 500, (256, 11))
    return Hierarchy(), {"pairs": pairs}, _identity, lambda params: geoopt.optim.RiemannianAdam(params, lr=1e-2)


def _torchode():
    import torchode as to

    class Dynamics(nn.Module):
        """A batch of neural ODEs solved by torchode: Tsit5 with a PID step-size controller per
        sample (each sample's own steps, accepted or rejected on the device), differentiated
        through the solver's operations."""

        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 8))
            term = to.ODETerm(lambda t, y: self.f(y))
            step = to.Tsit5(term=term)
            self.solver = to.AutoDiffAdjoint(step, to.PIDController(atol=1e-5, rtol=1e-4, pcoeff=0.2, icoeff=0.5,
                                                                     dcoeff=0.0, term=term))

        def forward(self, y0, t_eval, target):
            sol = self.solver.solve(to.InitialValueProblem(y0=y0, t_eval=t_eval))
            return F.mse_loss(sol.ys, target)

    torch.manual_seed(0)
    t = torch.linspace(0, 1, 10).repeat(16, 1)
    return Dynamics(), {"y0": torch.randn(16, 8), "t_eval": t, "target": torch.randn(16, 10, 8)}, _identity


def _nnaudio():
    from nnAudio.features import CQT1992v2

    class Tagger(nn.Module):
        """Audio tagged from its constant-Q transform (nnAudio's: complex kernels as 1-D
        convolutions), log-compressed, by a small CNN."""

        def __init__(self):
            super().__init__()
            self.cqt = CQT1992v2(sr=16000, hop_length=256, fmin=55, n_bins=48, bins_per_octave=12, verbose=False)
            self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                     nn.Flatten(), nn.Linear(32, 10))

        def forward(self, audio, labels):
            spec = torch.log1p(self.cqt(audio)).unsqueeze(1)
            return F.binary_cross_entropy_with_logits(self.net(spec), labels)

    torch.manual_seed(0)
    return Tagger(), {"audio": torch.randn(4, 16000) * 0.1, "labels": torch.randint(0, 2, (4, 10)).float()}, _identity


def _torch_struct():
    import torch_struct

    class Tagger(nn.Module):
        """A linear-chain CRF tagger of torch-struct: a BiLSTM's emissions plus transitions as
        edge potentials, its log-partition by a parallel scan of log-semiring matrix products."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(1000, 32)
            self.lstm = nn.LSTM(32, 32, batch_first=True, bidirectional=True)
            self.emit = nn.Linear(64, 8)
            self.transition = nn.Parameter(torch.randn(8, 8) * 0.1)

        def forward(self, words, lengths, tags):
            emissions = self.emit(self.lstm(self.embed(words))[0])
            edges = emissions[:, 1:, :, None] + self.transition[None, None]
            edges[:, 0] += emissions[:, 0, None, :]
            dist = torch_struct.LinearChainCRF(edges, lengths=lengths)
            parts = torch_struct.LinearChainCRF.struct.to_parts(tags, 8, lengths=lengths).type_as(edges)
            return -dist.log_prob(parts).mean()

    torch.manual_seed(0)
    lengths = torch.randint(10, 31, (16,))
    lengths[0] = 30
    return Tagger(), {"words": torch.randint(0, 1000, (16, 30)), "lengths": lengths,
                      "tags": torch.randint(0, 8, (16, 30))}, _identity


def _tensorly():
    import tensorly as tl
    from tensorly.decomposition import parafac

    tl.set_backend("pytorch")

    class Factorised(nn.Module):
        """A CP decomposition of rank 8 by tensorly's alternating least squares (Khatri-Rao
        products, unfoldings, a solve for each mode), 10 sweeps of it, on a 3-way tensor."""

        def forward(self, data):
            weights, factors = parafac(data, rank=8, n_iter_max=10, tol=0, init="random", random_state=0)
            return F.mse_loss(tl.cp_to_tensor((weights, factors)), data)

    torch.manual_seed(0)
    return Factorised(), {"data": torch.randn(40, 30, 20)}, _identity


def _torchmin():
    from torchmin import minimize

    class Fit(nn.Module):
        """A logistic regression fitted in the step by pytorch-minimize's BFGS (a strong-Wolfe
        line search; each iteration decided on the host from the last one's values), its
        result scored on held-out data."""

        def forward(self, x, y, x_test, y_test):
            def loss(w):
                return F.binary_cross_entropy_with_logits(x @ w, y) + 1e-3 * w.square().sum()

            w = minimize(loss, torch.zeros(x.shape[1]), method="bfgs", max_iter=30).x
            return F.binary_cross_entropy_with_logits(x_test @ w, y_test)

    torch.manual_seed(0)
    truth = torch.randn(20)
    x, xt = torch.randn(512, 20), torch.randn(256, 20)
    return Fit(), {"x": x, "y": (x @ truth > 0).float(), "x_test": xt, "y_test": (xt @ truth > 0).float()}, _identity


def _pytorch_tcn():
    from pytorch_tcn import TCN

    class Forecast(nn.Module):
        """A temporal convolutional network (pytorch-tcn: dilated causal convolutions with
        weight norm, residual blocks) forecasting the next step of each series."""

        def __init__(self):
            super().__init__()
            self.tcn = TCN(4, [32, 32, 32, 32], kernel_size=3, dropout=0.0, causal=True, use_norm="weight_norm")
            self.head = nn.Conv1d(32, 4, 1)

        def forward(self, series):
            return F.mse_loss(self.head(self.tcn(series[:, :, :-1])), series[:, :, 1:])

    torch.manual_seed(0)
    return Forecast(), {"series": torch.randn(16, 4, 257).cumsum(-1) * 0.1}, _identity


def _neuralop_fno():
    from neuralop.models import FNO

    class Darcy(nn.Module):
        """A Fourier neural operator (neuraloperator's FNO: real FFTs of the field, complex
        weights on the lowest modes, inverse FFTs) trained on a 2-D field's relative L2 error."""

        def __init__(self):
            super().__init__()
            self.fno = FNO(n_modes=(12, 12), in_channels=1, out_channels=1, hidden_channels=32, n_layers=4)

        def forward(self, field, solution):
            pred = self.fno(field)
            return ((pred - solution).flatten(1).norm(dim=1) / solution.flatten(1).norm(dim=1)).mean()

    torch.manual_seed(0)
    return Darcy(), {"field": torch.randn(4, 1, 64, 64), "solution": torch.randn(4, 1, 64, 64)}, _identity


def _pykeen_rotate():
    from pykeen.models import RotatE
    from pykeen.triples import TriplesFactory

    class LinkPrediction(nn.Module):
        """RotatE knowledge-graph embeddings (pykeen: entities as complex vectors, relations as
        rotations, a distance of head times relation to tail), trained by a margin ranking of
        positive triples against corrupted ones."""

        def __init__(self):
            super().__init__()
            triples = torch.stack([torch.randint(0, 2000, (4000,)), torch.randint(0, 40, (4000,)),
                                   torch.randint(0, 2000, (4000,))], dim=1)  # fmt: skip
            factory = TriplesFactory(mapped_triples=triples, entity_to_id={str(i): i for i in range(2000)},
                                     relation_to_id={str(i): i for i in range(40)})  # fmt: skip
            self.model = RotatE(triples_factory=factory, embedding_dim=64, random_seed=0)

        def forward(self, positives, negatives):
            pos = self.model.score_hrt(positives)
            neg = self.model.score_hrt(negatives)
            return F.margin_ranking_loss(pos.flatten(), neg.flatten(), torch.ones(len(positives)), margin=1.0)

    torch.manual_seed(0)
    positives = torch.stack([torch.randint(0, 2000, (256,)), torch.randint(0, 40, (256,)), torch.randint(0, 2000, (256,))], 1)
    negatives = positives.clone()
    negatives[:, 2] = torch.randint(0, 2000, (256,))
    return LinkPrediction(), {"positives": positives, "negatives": negatives}, _identity


def _sb3_ppo():
    import gymnasium as gym
    from stable_baselines3.common.policies import ActorCriticPolicy

    class Ppo(nn.Module):
        """Stable-Baselines3's actor-critic policy scored by PPO's clipped surrogate loss, value
        loss and entropy bonus over a rollout batch (the policy's evaluate_actions: a Gaussian over
        continuous actions, its log-probabilities and entropy)."""

        def __init__(self):
            super().__init__()
            space = gym.spaces.Box(-1.0, 1.0, (6,))
            self.policy = ActorCriticPolicy(gym.spaces.Box(-10.0, 10.0, (17,)), space, lambda _: 3e-4,
                                            net_arch=dict(pi=[64, 64], vf=[64, 64]))  # fmt: skip

        def forward(self, obs, actions, old_log_prob, advantages, returns):
            values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)
            ratio = torch.exp(log_prob - old_log_prob)
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            policy_loss = -torch.min(advantages * ratio, advantages * ratio.clamp(0.8, 1.2)).mean()
            return policy_loss + 0.5 * F.mse_loss(returns, values.flatten()) - 0.01 * entropy.mean()

    torch.manual_seed(0)
    n = 256
    x = {"obs": torch.randn(n, 17), "actions": torch.randn(n, 6).clamp(-1, 1), "old_log_prob": torch.randn(n) - 6,
         "advantages": torch.randn(n), "returns": torch.randn(n)}
    return Ppo(), x, _identity


def _s5():
    from s5 import S5Block

    class Sequence(nn.Module):
        """S5 state-space layers (s5-pytorch: a diagonal complex state matrix discretised per
        step size, applied over the sequence by an associative scan) classifying series."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(3, 64)
            self.blocks = nn.Sequential(S5Block(64, 64, bidir=False), S5Block(64, 64, bidir=False))
            self.head = nn.Linear(64, 10)

        def forward(self, series, labels):
            return F.cross_entropy(self.head(self.blocks(self.embed(series)).mean(1)), labels)

    torch.manual_seed(0)
    return Sequence(), {"series": torch.randn(8, 256, 3), "labels": torch.randint(0, 10, (8,))}, _identity


def _local_attention():
    from local_attention import LocalAttention

    class Windowed(nn.Module):
        """local-attention's windowed causal attention (each window of 64 tokens attends to
        itself and the one before, rotary positions) in a small language model."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(512, 128)
            self.qkv = nn.Linear(128, 384)
            self.attn = LocalAttention(dim=32, window_size=64, causal=True, look_backward=1, look_forward=0,
                                       dropout=0.0, exact_windowsize=False, use_rotary_pos_emb=True)  # fmt: skip
            self.out = nn.Linear(128, 512)

        def forward(self, ids):
            b, n = ids.shape
            q, k, v = self.qkv(self.embed(ids[:, :-1])).chunk(3, dim=-1)
            q, k, v = (t.view(b, n - 1, 4, 32).transpose(1, 2) for t in (q, k, v))
            h = self.attn(q, k, v).transpose(1, 2).reshape(b, n - 1, 128)
            return F.cross_entropy(self.out(h).flatten(0, 1), ids[:, 1:].flatten())

    torch.manual_seed(0)
    return Windowed(), {"ids": torch.randint(0, 512, (4, 513))}, _identity


def _siren():
    from siren_pytorch import SirenNet

    class Image(nn.Module):
        """A SIREN (sine activations with their initialisation) fitting an image from its pixel
        coordinates."""

        def __init__(self):
            super().__init__()
            self.net = SirenNet(dim_in=2, dim_hidden=128, dim_out=3, num_layers=4, w0_initial=30.0)

        def forward(self, coords, pixels):
            return F.mse_loss(self.net(coords), pixels)

    torch.manual_seed(0)
    axis = torch.linspace(-1, 1, 48)
    coords = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).view(-1, 2)
    return Image(), {"coords": coords, "pixels": torch.rand(48 * 48, 3)}, _identity


def _torchcfm():
    from torchcfm.conditional_flow_matching import ExactOptimalTransportConditionalFlowMatcher

    class FlowMatching(nn.Module):
        """Conditional flow matching with minibatch optimal-transport couplings (torchcfm: an
        exact OT plan between noise and data by POT, on the host, then points and velocities
        along the straight paths), a velocity network regressed onto them."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 128), nn.SELU(), nn.Linear(128, 128), nn.SELU(), nn.Linear(128, 2))
            self.matcher = ExactOptimalTransportConditionalFlowMatcher(sigma=0.01)

        def forward(self, noise, data):
            t, xt, ut = self.matcher.sample_location_and_conditional_flow(noise, data)
            return F.mse_loss(self.net(torch.cat([xt, t[:, None]], dim=-1)), ut)

    torch.manual_seed(0)
    angle = torch.rand(256) * 6.283
    data = torch.stack([angle.cos(), angle.sin()], -1) * 2 + 0.1 * torch.randn(256, 2)
    return FlowMatching(), {"noise": torch.randn(256, 2), "data": data}, _identity


def _brevitas():
    import brevitas.nn as qnn

    class QuantNet(nn.Module):
        """Quantization-aware training with brevitas: 4-bit weights and 8-bit activations, fake
        quantized in the forward pass (scales, rounding with straight-through gradients)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                qnn.QuantIdentity(bit_width=8, return_quant_tensor=False),
                qnn.QuantConv2d(3, 16, 3, padding=1, weight_bit_width=4), qnn.QuantReLU(bit_width=8),
                nn.MaxPool2d(2),
                qnn.QuantConv2d(16, 32, 3, padding=1, weight_bit_width=4), qnn.QuantReLU(bit_width=8),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), qnn.QuantLinear(32, 10, bias=True, weight_bit_width=4))

        def forward(self, x, labels):
            return F.cross_entropy(self.net(x), labels)

    torch.manual_seed(0)
    return QuantNet(), {"x": torch.randn(16, 3, 32, 32), "labels": torch.randint(0, 10, (16,))}, _identity


def _deepxde_pinn():
    import os

    os.environ.setdefault("DDE_BACKEND", "pytorch")
    import deepxde as dde

    class Poisson(nn.Module):
        """A physics-informed network (deepxde's FNN) for a 2-D Poisson equation: its Laplacian by
        deepxde's Hessians (gradients of gradients, taken with create_graph in the step), the
        residual's and the boundary's squared errors."""

        def __init__(self):
            super().__init__()
            self.net = dde.nn.FNN([2] + [64] * 3 + [1], "tanh", "Glorot normal")

        def forward(self, inside, boundary):
            with torch.enable_grad():  # (its evaluation takes the Laplacian too)
                inside = inside.clone().requires_grad_(True)
                u = self.net(inside)
                laplacian = dde.grad.hessian(u, inside, i=0, j=0) + dde.grad.hessian(u, inside, i=1, j=1)
                dde.grad.clear()
            source = 2 * torch.pi**2 * torch.sin(torch.pi * inside[:, :1]) * torch.sin(torch.pi * inside[:, 1:])
            return (laplacian + source).square().mean() + self.net(boundary).square().mean()

    torch.manual_seed(0)
    edge = torch.rand(128, 1)
    boundary = torch.cat([torch.cat([edge, torch.zeros_like(edge)], 1), torch.cat([torch.ones_like(edge), edge], 1)])
    return Poisson(), {"inside": torch.rand(512, 2), "boundary": boundary}, _identity


def _memory_efficient_attention():
    from memory_efficient_attention_pytorch import Attention

    class Chunked(nn.Module):
        """memory-efficient-attention-pytorch's attention in query and key chunks (a running
        softmax over key buckets, each chunk's work checkpointed: recomputed in the backward
        pass) in a small language model."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(512, 256)
            self.attn = Attention(dim=256, heads=4, dim_head=64, causal=True, memory_efficient=True,
                                  q_bucket_size=128, k_bucket_size=128)  # fmt: skip
            self.out = nn.Linear(256, 512)

        def forward(self, ids):
            h = self.embed(ids[:, :-1])
            return F.cross_entropy(self.out(h + self.attn(h)).flatten(0, 1), ids[:, 1:].flatten())

    torch.manual_seed(0)
    return Chunked(), {"ids": torch.randint(0, 512, (2, 513))}, _identity


class _Pooled(nn.Module):
    """A classification loss over a sequence model's tokens, mean-pooled (``body(tokens)``)."""

    def __init__(self, body, width: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(width, 10)

    def forward(self, tokens, labels):
        return F.cross_entropy(self.head(self.body(tokens).mean(1)), labels)


def _nystrom():
    """nystrom-attention's Nystromformer (attention through landmarks, the pseudo-inverse by
    Newton-Schulz iterations, a residual depthwise convolution of the values)."""
    from nystrom_attention import Nystromformer

    torch.manual_seed(0)
    body = Nystromformer(dim=128, depth=2, dim_head=32, heads=4, num_landmarks=64)
    return _Pooled(body, 128), {"tokens": torch.randn(2, 512, 128), "labels": torch.randint(0, 10, (2,))}, _identity


def _soft_moe():
    """soft-moe-pytorch's soft mixture of experts (every token weighted into every expert's slots by
    a softmax, the experts' outputs weighted back)."""
    from soft_moe_pytorch import SoftMoE

    torch.manual_seed(0)
    body = SoftMoE(dim=128, seq_len=256, num_experts=8)
    return _Pooled(body, 128), {"tokens": torch.randn(4, 256, 128), "labels": torch.randint(0, 10, (4,))}, _identity


def _mlp_mixer():
    from mlp_mixer_pytorch import MLPMixer

    torch.manual_seed(0)
    net = MLPMixer(image_size=64, channels=3, patch_size=8, dim=128, depth=4, num_classes=10)
    return _Classified(net), {"x": torch.randn(8, 3, 64, 64), "labels": torch.randint(0, 10, (8,))}, _identity


class _RecBoleData:
    """What a RecBole model reads of its dataset: the counts of users and items, and the user-item
    interactions (a sparse matrix, for LightGCN's normalised adjacency)."""

    def __init__(self, users: int, items: int, pairs: int):
        import numpy as np
        import scipy.sparse as sp

        gen = np.random.default_rng(0)
        rows, cols = gen.integers(0, users, pairs), (gen.pareto(1.2, pairs) * 20).astype(int) % items
        self.counts = {"user_id": users, "item_id": items}
        self.matrix = sp.coo_matrix((np.ones(pairs), (rows, cols)), shape=(users, items))
        self.matrix.sum_duplicates()

    def num(self, field: str) -> int:
        return self.counts[field]

    def inter_matrix(self, form: str = "coo"):
        return self.matrix.copy()


_RECBOLE = {"USER_ID_FIELD": "user_id", "ITEM_ID_FIELD": "item_id", "NEG_PREFIX": "neg_", "LIST_SUFFIX": "_list",
            "ITEM_LIST_LENGTH_FIELD": "item_length", "MAX_ITEM_LIST_LENGTH": 50, "device": torch.device("cpu")}


def _recbole_sasrec():
    anomaly = torch.is_anomaly_enabled()
    from recbole.model.sequential_recommender import SASRec

    # (importing RecBole's sequential models turns on autograd's anomaly detection for the whole
    # process, in sine.py: every node autograd made then saved a Python traceback, 17-150 us a
    # view, in the original's steps and the replay's alike, and in every model built after it)
    torch.autograd.set_detect_anomaly(anomaly)

    class Sequence(nn.Module):
        """RecBole's SASRec: self-attention over each user's item history (padded, its length
        given), the last real position's state scored against every item by cross-entropy."""

        def __init__(self):
            super().__init__()
            config = {**_RECBOLE, "n_layers": 2, "n_heads": 2, "hidden_size": 64, "inner_size": 256,
                      "hidden_dropout_prob": 0.0, "attn_dropout_prob": 0.0, "hidden_act": "gelu",
                      "layer_norm_eps": 1e-12, "initializer_range": 0.02, "loss_type": "CE"}  # fmt: skip
            self.model = SASRec(config, _RecBoleData(2000, 3000, 40000))

        def forward(self, history, lengths, target):
            return self.model.calculate_loss({"item_id_list": history, "item_length": lengths, "item_id": target})

    torch.manual_seed(0)
    lengths = torch.randint(5, 51, (128,))
    history = torch.randint(1, 3000, (128, 50)) * (torch.arange(50)[None] < lengths[:, None])
    return Sequence(), {"history": history, "lengths": lengths, "target": torch.randint(1, 3000, (128,))}, _identity


def _torchfm(kind: str):
    from torchfm.model.dfm import DeepFactorizationMachineModel
    from torchfm.model.xdfm import ExtremeDeepFactorizationMachineModel

    fields, batch = ((1000, 50, 3000, 20, 400, 8, 12000, 100), 512) if kind == "deepfm" else ((1000, 50, 3000, 20, 400, 8), 256)

    class Ctr(nn.Module):
        """pytorch-fm's click models over one embedding table for all fields (each field's ids
        moved past the fields before it by an added offset), trained by binary cross-entropy on
        clicks: DeepFM (a factorization machine's pairwise term beside an MLP) or xDeepFM (a
        compressed interaction network, outer products of the field embeddings convolved
        field-wise layer by layer, beside an MLP)."""

        def __init__(self):
            super().__init__()
            self.model = (DeepFactorizationMachineModel(fields, embed_dim=16, mlp_dims=(64, 32), dropout=0.0)
                          if kind == "deepfm" else
                          ExtremeDeepFactorizationMachineModel(fields, embed_dim=16, cross_layer_sizes=(32, 32),
                                                               split_half=True, mlp_dims=(64, 32), dropout=0.0))  # fmt: skip

        def forward(self, ids, clicks):
            return F.binary_cross_entropy(self.model(ids), clicks)

    torch.manual_seed(0)
    ids = torch.stack([(torch.rand(batch) ** 2 * n).long() for n in fields], 1)
    return Ctr(), {"ids": ids, "clicks": torch.randint(0, 2, (batch,)).float()}, _identity


def _deepctr_din():
    from deepctr_torch.inputs import DenseFeat, SparseFeat, VarLenSparseFeat
    from deepctr_torch.models import DIN

    columns = [SparseFeat("user", 500, embedding_dim=16), SparseFeat("item", 3000, embedding_dim=16),
               SparseFeat("category", 60, embedding_dim=8), DenseFeat("price", 1),
               VarLenSparseFeat(SparseFeat("hist_item", 3000, embedding_dim=16, embedding_name="item"), maxlen=30,
                                length_name="seq_length"),
               VarLenSparseFeat(SparseFeat("hist_category", 60, embedding_dim=8, embedding_name="category"),
                                maxlen=30, length_name="seq_length")]  # fmt: skip

    class Interest(nn.Module):
        """DeepCTR-Torch's Deep Interest Network: the candidate item's attention over the user's
        padded history of items and categories (the history's length given), pooled into the
        user's interest, then an MLP; the features come as one float tensor whose columns the
        model cuts out and converts to ids."""

        def __init__(self):
            super().__init__()
            self.model = DIN(columns, ["item", "category"], dnn_hidden_units=(64, 32), att_hidden_size=(32, 16),
                             device="cpu", seed=0)  # fmt: skip

        def forward(self, features, clicks):
            return F.binary_cross_entropy(self.model(features).squeeze(-1), clicks)

    torch.manual_seed(0)
    batch = 256
    lengths = torch.randint(1, 31, (batch,))
    pad = torch.arange(30)[None] < lengths[:, None]
    hist_item = (torch.rand(batch, 30) ** 2 * 2999 + 1).long() * pad
    hist_cat = torch.randint(1, 60, (batch, 30)) * pad
    features = torch.cat([torch.randint(1, 500, (batch, 1)), torch.randint(1, 3000, (batch, 1)),
                          torch.randint(1, 60, (batch, 1)), torch.rand(batch, 1), hist_item, hist_cat,
                          lengths[:, None]], 1).float()  # fmt: skip
    return Interest(), {"features": features, "clicks": torch.randint(0, 2, (batch,)).float()}, _identity


def _product_key_memory():
    from product_key_memory import PKM

    class Memory(nn.Module):
        """product-key-memory: a layer whose queries pick their top keys from two half-key sets and
        read the values of the best of those products by an embedding bag weighted by the scores."""

        def __init__(self):
            super().__init__()
            self.pkm = PKM(dim=256, heads=4, num_keys=128, topk=16, dim_head=64)
            self.out = nn.Linear(256, 10)

        def forward(self, x):
            return self.out(self.pkm(x).mean(1)).square().mean()

    torch.manual_seed(0)
    return Memory(), {"x": torch.randn(8, 128, 256)}, _identity


def _conformer():
    from conformer import ConformerBlock

    class Speech(nn.Module):
        """conformer: two macaron feed-forward halves around self-attention with relative
        positions and a depthwise convolution module (GLU, batch norm, Swish), over audio frames."""

        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*(ConformerBlock(dim=144, dim_head=36, heads=4, conv_kernel_size=31)
                                          for _ in range(2)))  # fmt: skip
            self.head = nn.Linear(144, 32)

        def forward(self, frames):
            return self.head(self.blocks(frames)).square().mean()

    torch.manual_seed(0)
    return Speech(), {"frames": torch.randn(4, 200, 144)}, _identity


def _point_transformer():
    from point_transformer_pytorch import PointTransformerLayer

    class Points(nn.Module):
        """point-transformer-pytorch: vector attention over each point's nearest neighbours (their
        distances computed, the closest picked by top-k, features and positions gathered), a
        relative-position MLP, over a point cloud."""

        def __init__(self):
            super().__init__()
            self.layer = PointTransformerLayer(dim=64, pos_mlp_hidden_dim=64, attn_mlp_hidden_mult=4, num_neighbors=16)
            self.head = nn.Linear(64, 8)

        def forward(self, feats, pos):
            return self.head(self.layer(feats, pos).mean(1)).square().mean()

    torch.manual_seed(0)
    return Points(), {"feats": torch.randn(4, 512, 64), "pos": torch.randn(4, 512, 3)}, _identity


def _egnn():
    from egnn_pytorch import EGNN_Network

    class Molecule(nn.Module):
        """egnn-pytorch: an E(n)-equivariant graph network over atoms (token ids) and coordinates,
        each atom's messages from its nearest neighbours updating features and positions."""

        def __init__(self):
            super().__init__()
            self.net = EGNN_Network(num_tokens=20, dim=32, depth=2, num_nearest_neighbors=8, coor_weights_clamp_value=2.0)

        def forward(self, atoms, coors):
            feats, moved = self.net(atoms, coors)
            return feats.pow(2).mean() + moved.pow(2).mean()

    torch.manual_seed(0)
    return Molecule(), {"atoms": torch.randint(0, 20, (8, 64)), "coors": torch.randn(8, 64, 3)}, _identity


def _routing_transformer():
    from routing_transformer import RoutingTransformerLM

    class Lm(nn.Module):
        """routing-transformer: causal attention routed by online k-means (each query and key
        to its nearest centroids, attention within each cluster's top members) beside local
        windowed attention; its clustering's auxiliary loss added to the language model's."""

        def __init__(self):
            super().__init__()
            self.lm = RoutingTransformerLM(num_tokens=2000, dim=128, heads=4, depth=2, max_seq_len=512,
                                           window_size=64, causal=True, n_local_attn_heads=2)  # fmt: skip

        def forward(self, ids):
            logits, aux = self.lm(ids)
            return F.cross_entropy(logits[:, :-1].reshape(-1, 2000), ids[:, 1:].reshape(-1)) + aux

    torch.manual_seed(0)
    return Lm(), {"ids": torch.randint(0, 2000, (2, 512))}, _identity


def _came(params):
    from came_pytorch import CAME

    return CAME(params, lr=2e-4, weight_decay=1e-2, betas=(0.9, 0.999, 0.9999), eps=(1e-30, 1e-16))


def _pomegranate_hmm():
    from pomegranate.distributions import Normal
    from pomegranate.hmm import DenseHMM

    class Decoded(nn.Module):
        """A dense hidden Markov model of pomegranate (1.x, written in torch) over 6 states with
        diagonal normal emissions: the forward-backward pass's state posteriors of a batch of
        sequences (log-space recursions, a step at a time), scored by the log-likelihood
        (inference only: its parameters are frozen tensors, fitted by EM, not by gradients)."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            states = [Normal((torch.randn(4) * 2).tolist(), [1.0] * 4, covariance_type="diag") for _ in range(6)]
            edges = torch.softmax(torch.randn(6, 6) * 2, -1)
            self.hmm = DenseHMM(states, edges=edges.tolist(), starts=[1 / 6] * 6, ends=[0.01] * 6)

        def forward(self, sequences):
            _, _, posteriors, _, log_likelihood = self.hmm.forward_backward(sequences)
            return posteriors.exp().mean() - log_likelihood.mean()

    torch.manual_seed(0)
    return Decoded(), {"sequences": torch.randn(16, 100, 4) * 2}, _identity


def _ctgan():
    from ctgan.synthesizers.ctgan import Discriminator, Generator

    class Synthesizer(nn.Module):
        """CTGAN's generator and its packed discriminator (ten rows judged together): the
        generator's output activated column by column, a tanh for each continuous column's value
        and a Gumbel softmax over its modes and over each categorical column's categories, and
        the generator's loss (the critic's score of the fakes) with the conditional vector's
        cross-entropy."""

        spans = (("tanh", 1), ("softmax", 10)) * 4 + (("softmax", 30), ("softmax", 8), ("softmax", 50))

        def __init__(self):
            super().__init__()
            width = sum(n for _, n in self.spans)
            self.cond = 30 + 8 + 50
            self.generator = Generator(128 + self.cond, (256, 256), width)
            self.critic = Discriminator(width + self.cond, (256, 256), pac=10)

        def forward(self, noise, cond):
            fake, pieces, at = self.generator(torch.cat([noise, cond], 1)), [], 0
            for kind, n in self.spans:
                part = fake[:, at:at + n]
                pieces.append(torch.tanh(part) if kind == "tanh" else F.gumbel_softmax(part, tau=0.2))
                at += n
            made = torch.cat(pieces, 1)
            chosen = fake[:, at - 88:at].reshape(-1, 88)
            return -self.critic(torch.cat([made, cond], 1)).mean() + F.cross_entropy(chosen, cond.argmax(1))

    torch.manual_seed(0)
    cond = F.one_hot(torch.randint(0, 88, (500,)), 88).float()
    return Synthesizer(), {"noise": torch.randn(500, 128), "cond": cond}, _identity


def _xlstm():
    from xlstm import mLSTMBlockConfig, mLSTMLayerConfig, xLSTMBlockStack, xLSTMBlockStackConfig

    torch.manual_seed(0)
    config = xLSTMBlockStackConfig(
        mlstm_block=mLSTMBlockConfig(mlstm=mLSTMLayerConfig(conv1d_kernel_size=4, qkv_proj_blocksize=4, num_heads=4)),
        context_length=256, num_blocks=2, embedding_dim=128, slstm_at=[])  # fmt: skip
    body = xLSTMBlockStack(config)  # (mLSTM blocks: the parallel form's gated, stabilised decay matrix)
    return _Pooled(body, 128), {"tokens": torch.randn(4, 256, 128), "labels": torch.randint(0, 10, (4,))}, _identity


def _kymatio():
    import scipy.special

    if not hasattr(scipy.special, "sph_harm"):  # (SciPy 1.15 renamed it; kymatio's 3-D transform imports the old name)
        scipy.special.sph_harm = lambda m, n, theta, phi: scipy.special.sph_harm_y(n, m, phi, theta)
    from kymatio.torch import Scattering1D

    class Scattered(nn.Module):
        """Audio classified from its wavelet scattering coefficients (kymatio's 1-D scattering:
        Morlet filter banks applied in the Fourier domain, moduli, low-pass averaging and
        subsampling at two orders), log-compressed, by a linear head."""

        def __init__(self):
            super().__init__()
            self.scattering = Scattering1D(J=6, shape=4096, Q=8)
            self.head = nn.LazyLinear(10)

        def forward(self, audio, labels):
            coefficients = torch.log1p(self.scattering(audio).abs()).mean(-1)
            return F.cross_entropy(self.head(coefficients), labels)

    torch.manual_seed(0)
    model = Scattered()
    model(torch.randn(2, 4096), torch.zeros(2, dtype=torch.long))  # (the head's width: the count of coefficients)
    return model, {"audio": torch.randn(16, 4096), "labels": torch.randint(0, 10, (16,))}, _identity


def _esm2():
    import esm
    from esm.model.esm2 import ESM2

    class MaskedProtein(nn.Module):
        """fair-esm's ESM-2 protein language model (4 layers, rotary attention, token dropout of
        its masked positions), trained by masked-token cross-entropy on padded sequences."""

        def __init__(self):
            super().__init__()
            self.alphabet = esm.data.Alphabet.from_architecture("ESM-1b")
            self.model = ESM2(num_layers=4, embed_dim=320, attention_heads=20, alphabet=self.alphabet)

        def forward(self, tokens, targets):
            logits = self.model(tokens)["logits"]
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    torch.manual_seed(0)
    model = MaskedProtein()
    abc = model.alphabet
    lengths = torch.randint(60, 201, (8,))
    residues = torch.randint(4, 24, (8, 202))
    tokens = torch.full((8, 202), abc.padding_idx)
    for row, n in enumerate(lengths.tolist()):
        tokens[row, 0], tokens[row, 1:n + 1], tokens[row, n + 1] = abc.cls_idx, residues[row, :n], abc.eos_idx
    masked = (torch.rand(8, 202) < 0.15) & (tokens >= 4) & (tokens < 24)
    targets = torch.where(masked, tokens, torch.full_like(tokens, -100))
    tokens = tokens.masked_fill(masked, abc.mask_idx)
    return model, {"tokens": tokens, "targets": targets}, _identity


def _mixture_of_experts():
    from mixture_of_experts import MoE

    class Routed(nn.Module):
        """lucidrains' mixture-of-experts: top-2 gating with capacities (positions in each
        expert's buffer by cumulative sums of one-hot choices), dispatch and combine tensors,
        the auxiliary balancing loss added to a regression loss."""

        def __init__(self):
            super().__init__()
            self.moe = MoE(dim=128, num_experts=8, hidden_dim=256)

        def forward(self, tokens, target):
            out, aux = self.moe(tokens)
            return F.mse_loss(out, target) + aux

    torch.manual_seed(0)
    return Routed(), {"tokens": torch.randn(4, 256, 128), "target": torch.randn(4, 256, 128)}, _identity


def _linear_attention():
    from linear_attention_transformer import LinearAttentionTransformerLM

    class Lm(nn.Module):
        """linear-attention-transformer's causal language model (linear attention by
        cumulative sums of key-value products, local attention heads in windows, axial
        position embeddings), trained by next-token cross-entropy."""

        def __init__(self):
            super().__init__()
            self.lm = LinearAttentionTransformerLM(num_tokens=5000, dim=256, depth=2, max_seq_len=512, heads=4,
                                                   causal=True, n_local_attn_heads=2, local_attn_window_size=64)  # fmt: skip

        def forward(self, ids):
            logits = self.lm(ids[:, :-1])
            return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:])

    torch.manual_seed(0)
    return Lm(), {"ids": torch.randint(0, 5000, (2, 513))}, _identity


def _g_mlp():
    from g_mlp_pytorch import gMLP

    torch.manual_seed(0)
    body = gMLP(dim=128, depth=4, seq_len=256, attn_dim=32)  # (spatial gating units, a tiny attention beside them)
    return _Pooled(body, 128), {"tokens": torch.randn(4, 256, 128), "labels": torch.randint(0, 10, (4,))}, _identity



def _hummingbird(implementation: str):
    """hummingbird-ml's compilation of a scikit-learn gradient-boosted forest (50 trees of depth 5)
    into tensor operations (inference only: its trees are fitted, not trained by gradients):
    ``gemm`` as three matrix products (features against every node's threshold, nodes against
    each leaf's path, leaves against the trees' values), ``perf_tree_trav`` as a walk down all
    trees at once, level by level, each level gathering the next node's index from the one before."""
    import hummingbird.ml
    import numpy as np
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.RandomState(0)
    features = rng.randn(4000, 20).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] * features[:, 2] - 0.5 * features[:, 3] ** 2 > 0).astype(int)
    forest = GradientBoostingClassifier(n_estimators=50, max_depth=5, random_state=0).fit(features, labels)
    executor = hummingbird.ml.convert(forest, "torch", extra_config={"tree_implementation": implementation}).model

    class Forest(nn.Module):
        def __init__(self):
            super().__init__()
            self.executor = executor

        def forward(self, rows):
            return self.executor(rows)[1]  # (the labels and the classes' probabilities)

    torch.manual_seed(0)
    return Forest(), {"rows": torch.from_numpy(rng.randn(1024, 20).astype(np.float32))}, _identity


def _e3nn_o3():
    """e3nn's ``o3`` module; e3nn 0.4 (which MACE pins) loads its constants with ``torch.load``,
    which refuses their slices from torch 2.6 on unless allowed."""
    with torch.serialization.safe_globals([slice]):
        from e3nn import o3
    return o3


def _mace():
    """MACE, an equivariant interatomic potential, trained on energies and forces (the forces as
    the negative gradient of the energy with respect to the positions, taken with create_graph in
    the step; inference, without autograd, gives the energy alone): four structures of 24 atoms of three elements, their edges within a 3 A cutoff."""
    import ase
    import numpy as np

    o3 = _e3nn_o3()
    from mace import data, modules, tools
    from mace.tools import torch_geometric

    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    elements = tools.AtomicNumberTable([1, 6, 8])
    graphs = []
    for _ in range(4):
        atoms = ase.Atoms(numbers=rng.choice([1, 6, 8], 24), positions=rng.rand(24, 3) * 6.0)
        graphs.append(data.AtomicData.from_config(data.config_from_atoms(atoms), z_table=elements, cutoff=3.0))
    batch = next(iter(torch_geometric.dataloader.DataLoader(graphs, batch_size=4, shuffle=False))).to_dict()
    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    mace = modules.MACE(r_max=3.0, num_bessel=8, num_polynomial_cutoff=5, max_ell=2, interaction_cls=block,
                        interaction_cls_first=block, num_interactions=2, num_elements=3,
                        hidden_irreps=o3.Irreps("32x0e + 32x1o"), MLP_irreps=o3.Irreps("16x0e"), gate=F.silu,
                        atomic_energies=np.zeros(3), avg_num_neighbors=8.0, atomic_numbers=[1, 6, 8],
                        correlation=3)  # fmt: skip
    names = ("positions", "node_attrs", "edge_index", "shifts", "unit_shifts", "cell", "batch", "ptr")

    class Potential(nn.Module):
        def __init__(self):
            super().__init__()
            self.mace = mace

        def forward(self, energy, forces, **graph):
            if not torch.is_grad_enabled():  # (inference: the energy alone, as the forces need autograd)
                return F.mse_loss(self.mace(graph, training=False, compute_force=False)["energy"], energy)
            out = self.mace(graph, training=self.training, compute_force=True)
            return F.mse_loss(out["energy"], energy) + 10.0 * F.mse_loss(out["forces"], forces)

    x = {name: batch[name] for name in names}
    x["energy"], x["forces"] = torch.randn(4), torch.randn_like(batch["positions"])
    return Potential(), x, _identity


def _gluonts_deepar():
    """GluonTS's DeepAR (PyTorch): an LSTM over lagged, mean-scaled targets and time features whose
    outputs parametrise a Student's t; trained by the negative log-likelihood of the context and
    the forecast window, 32 series of 96 + 24 steps."""
    from gluonts.torch.model.deepar.module import DeepARModel

    torch.manual_seed(0)
    context, horizon, lags = 96, 24, [1, 2, 3, 4, 5, 6, 7, 12, 24, 48]
    model = DeepARModel(freq="H", context_length=context, prediction_length=horizon, num_feat_dynamic_real=2,
                        num_feat_static_real=1, num_feat_static_cat=1, cardinality=[32], lags_seq=lags,
                        num_layers=2, hidden_size=40, dropout_rate=0.0)  # fmt: skip
    past = context + max(lags)
    series, t = 32, torch.arange(past + horizon, dtype=torch.float32)
    target = (10 + 5 * torch.sin(2 * torch.pi * t / 24) + torch.randn(series, past + horizon)).abs()
    time_feat = torch.stack([torch.sin(2 * torch.pi * t / 24), t / (past + horizon)], -1).expand(series, -1, -1)

    class Forecaster(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, **batch):
            return self.model.loss(**batch).mean()

    x = {"feat_static_cat": torch.arange(series).unsqueeze(1), "feat_static_real": torch.rand(series, 1),
         "past_time_feat": time_feat[:, :past].contiguous(), "past_target": target[:, :past],
         "past_observed_values": torch.ones(series, past), "future_time_feat": time_feat[:, past:].contiguous(),
         "future_target": target[:, past:], "future_observed_values": torch.ones(series, horizon)}  # fmt: skip
    return Forecaster(), x, _identity


def _titans():
    """titans-pytorch's neural memory: a small MLP whose weights are updated at test time, chunk by
    chunk, by per-sample gradients of a key-value loss (torch.func's vmap of grad) with momentum
    and weight decay, then read by the queries."""
    from titans_pytorch import NeuralMemory

    torch.manual_seed(0)

    class Memory(nn.Module):
        def __init__(self):
            super().__init__()
            self.memory = NeuralMemory(dim=128, chunk_size=32)
            self.head = nn.Linear(128, 10)

        def forward(self, tokens, labels):
            retrieved, _ = self.memory(tokens)
            return F.cross_entropy(self.head(retrieved.mean(1)), labels)

    return Memory(), {"tokens": torch.randn(2, 256, 128), "labels": torch.randint(0, 10, (2,))}, _identity


def _mega():
    """mega-pytorch's Mega layers: a multi-headed damped exponential moving average (its kernel
    applied by FFT convolution) gating single-head attention with a Laplace attention function."""
    from mega_pytorch import MegaLayer

    torch.manual_seed(0)
    body = nn.Sequential(*(MegaLayer(dim=128, ema_heads=16, attn_dim_qk=64, attn_dim_value=256, laplacian_attn_fn=True)
                           for _ in range(2)))  # fmt: skip
    return _Pooled(body, 128), {"tokens": torch.randn(4, 256, 128), "labels": torch.randint(0, 10, (4,))}, _identity


def _block_recurrent():
    """block-recurrent-transformer-pytorch: a language model over 64-token blocks whose recurrent
    layer carries 64 state vectors from block to block through cross-attention and gates."""
    from block_recurrent_transformer_pytorch import BlockRecurrentTransformer

    torch.manual_seed(0)
    net = BlockRecurrentTransformer(num_tokens=2000, dim=128, depth=2, dim_head=32, heads=4, max_seq_len=256,
                                    block_width=64, num_state_vectors=64, recurrent_layers=(2,),
                                    use_compressed_mem=False)  # fmt: skip

    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, ids):
            logits = self.net(ids[:, :-1])[0]
            return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:])

    return Recurrent(), {"ids": (torch.rand(2, 257) ** 2 * 2000).long()}, _identity


def _torchlibrosa():
    """torchlibrosa's spectrogram (an STFT as strided convolutions) and log-mel filter bank in
    front of a PANNs-style audio tagger: convolution blocks with batch norm and average
    pooling, then max-plus-mean pooling over time and a multi-label loss (SpecAugment left
    out: its random stripes change the step's shapes from call to call)."""
    from torchlibrosa.stft import LogmelFilterBank, Spectrogram

    torch.manual_seed(0)

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.AvgPool2d(2))  # fmt: skip

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.spectrogram = Spectrogram(n_fft=512, hop_length=160, win_length=512, freeze_parameters=True)
            self.mel = LogmelFilterBank(sr=16000, n_fft=512, n_mels=64, fmin=50, fmax=8000, freeze_parameters=True)
            self.bn0 = nn.BatchNorm2d(64)
            self.blocks = nn.Sequential(block(1, 32), block(32, 64), block(64, 128))
            self.head = nn.Linear(128, 50)

        def forward(self, audio, tags):
            x = self.mel(self.spectrogram(audio))  # (batch, 1, frames, mels)
            x = self.bn0(x.transpose(1, 3)).transpose(1, 3)
            x = self.blocks(x).mean(3)
            x = x.max(2).values + x.mean(2)
            return F.binary_cross_entropy_with_logits(self.head(x), tags)

    return Tagger(), {"audio": torch.randn(8, 32000) * 0.1, "tags": (torch.rand(8, 50) < 0.1).float()}, _identity


def torchvision_module():
    """torchvision, imported. PyPI's torchvision is a CUDA build, whose C operators do not load
    beside torch's CPU build, and its import then fails where it registers fake kernels for two of
    them (``nms``, ``qnms``): there their schemas are defined first, so that its Python parts
    import (its models and transforms; the steps traced here call none of its operators). Where
    it imports as it is (a build of torch's release for this device), it is left alone."""
    try:
        import torchvision
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
        _unimport("torchvision")
        lib = _TORCHVISION_SCHEMAS.setdefault("lib", torch.library.Library("torchvision", "DEF"))
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision
    return torchvision


def _unimport(package: str) -> None:
    """``package`` and its modules taken out of ``sys.modules``, after an import of it failed
    halfway, so that the next import starts over."""
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[name]


_TORCHVISION_SCHEMAS: dict = {}  # (the library object that holds the schemas defined, kept alive)


def _ultralytics_yolo():
    """Ultralytics' YOLO11n detector, built from its YAML (no weights), trained by its own
    criterion: the task-aligned assigner picks each ground-truth box's anchors (top-k of a
    score that mixes class probability and IoU), then BCE over the classes, CIoU and distribution
    focal loss over the boxes of the anchors it picked (a data-dependent count). Its inference
    decodes the boxes of every anchor (no NMS: that follows the model, on the host)."""
    import types

    torchvision_module()
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    detector = DetectionModel("yolo11n.yaml", nc=8, verbose=False)
    detector.args = types.SimpleNamespace(box=7.5, cls=0.5, dfl=1.5)  # (the trainer's default gains)

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.detector = detector

        def forward(self, img, batch_idx, cls, bboxes):
            if not self.training:
                return self.detector(img)
            loss, _ = self.detector.loss({"img": img, "batch_idx": batch_idx, "cls": cls, "bboxes": bboxes})
            return loss.sum()

    boxes = 12  # three an image, as normalised centre and size
    return Yolo(), {"img": torch.rand(4, 3, 128, 128), "batch_idx": torch.arange(4).repeat_interleave(3).float(),
                    "cls": torch.randint(0, 8, (boxes, 1)).float(),
                    "bboxes": torch.cat([torch.rand(boxes, 2) * 0.6 + 0.2, torch.rand(boxes, 2) * 0.3 + 0.05], 1)}, _identity  # fmt: skip


#: torchvision's detectors: constructor, its options (smaller images, fewer proposals and boxes a
#: step than its defaults, so that a CPU step takes a second or less), size of the images
_DETECTORS = {
    "faster_rcnn": ("fasterrcnn_mobilenet_v3_large_320_fpn",
                    {"rpn_post_nms_top_n_train": 500, "box_batch_size_per_image": 128}, 320),
    "mask_rcnn": ("maskrcnn_resnet50_fpn", {"min_size": 160, "max_size": 160, "rpn_post_nms_top_n_train": 500,
                                            "rpn_post_nms_top_n_test": 300, "box_batch_size_per_image": 64,
                                            "box_detections_per_img": 20}, 160),
    "retinanet": ("retinanet_resnet50_fpn", {"min_size": 160, "max_size": 160}, 160),
    "fcos": ("fcos_resnet50_fpn", {"min_size": 160, "max_size": 160}, 160),
    "ssdlite": ("ssdlite320_mobilenet_v3_large", {}, 320),
}  # fmt: skip


def _torchvision_detector(kind: str):
    """One of torchvision's detectors (no weights), two images with three boxes each: trained by
    its own losses, and its inference with its post-processing (score thresholds and NMS, whose
    counts follow the data). Two-stage ones pool each proposal's features by RoIAlign; Mask R-CNN
    pastes each detection's mask into its image. Their operators are torchvision's own
    (``torchvision::nms``, ``roi_align`` and its backward), which load where torchvision's C library
    does: a CUDA build of torch with torchvision's release for it runs them on the CPU (``pip
    install torch==2.14.1 torchvision==0.29.1``); beside the CPU torch they do not exist."""
    tv = _library_operators(torchvision_module, "torchvision", "nms", "roi_align")
    factory, options, size = _DETECTORS[kind]
    torch.manual_seed(0)
    net = getattr(tv.models.detection, factory)(weights=None, weights_backbone=None, num_classes=6, **options)

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, images, boxes, labels, masks):
            if not self.training:
                return self.net(list(images))
            targets = [{"boxes": b, "labels": c, "masks": m} for b, c, m in zip(boxes, labels, masks)]
            return sum(self.net(list(images), targets).values())

    g = torch.Generator().manual_seed(1)
    corner = torch.rand(2, 3, 2, generator=g) * size * 0.6
    boxes = torch.cat([corner, corner + torch.rand(2, 3, 2, generator=g) * size * 0.3 + size * 0.1], -1)
    columns = torch.arange(size)
    inside = [(columns >= boxes[..., i, None]) & (columns < boxes[..., i + 2, None]) for i in (0, 1)]  # (2, 3, size)
    masks = (inside[1][..., :, None] & inside[0][..., None, :]).to(torch.uint8)
    return Detector(), {"images": torch.rand(2, 3, size, size, generator=g), "boxes": boxes,
                        "labels": torch.randint(1, 6, (2, 3), generator=g), "masks": masks}, _identity  # fmt: skip


def _torchvision_deformable():
    """torchvision's own operators in a small network: modulated deformable convolutions (DCNv2:
    offsets and a mask predicted by a convolution), position-sensitive RoIAlign and RoI pooling of
    boxes over the features, a classifier of the pooled regions (``torchvision::deform_conv2d``,
    ``ps_roi_align``, ``roi_pool`` and their backward operators). They need torchvision's C
    library, as :func:`_torchvision_detector` says."""
    ops = _library_operators(torchvision_module, "torchvision", "deform_conv2d", "ps_roi_align", "roi_pool").ops
    torch.manual_seed(0)

    class Deformable(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.offset = nn.Conv2d(channels, 3 * 9, 3, padding=1)
            self.conv = ops.DeformConv2d(channels, channels, 3, padding=1)

        def forward(self, x):
            offset, mask = self.offset(x).split([18, 9], 1)
            return F.relu(self.conv(x, offset, mask.sigmoid())) + x

    class Regions(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 36, 3, stride=2, padding=1), nn.ReLU())
            self.body = nn.Sequential(Deformable(36), Deformable(36))
            self.classify = nn.Linear(4 * 9 + 36 * 4, 5)

        def forward(self, image, rois):
            x = self.body(self.stem(image))
            sensitive = ops.ps_roi_align(x, rois, output_size=3, spatial_scale=0.5, sampling_ratio=2).flatten(1)
            pooled = ops.roi_pool(x, rois, output_size=2, spatial_scale=0.5).flatten(1)
            return self.classify(torch.cat([sensitive, pooled], 1))

    g = torch.Generator().manual_seed(1)
    corner = torch.rand(32, 2, generator=g) * 80
    rois = torch.cat([torch.randint(0, 4, (32, 1), generator=g).float(), corner, corner + 8 + torch.rand(32, 2, generator=g) * 40], 1)
    labels = torch.randint(0, 5, (32,), generator=g)
    return Regions(), {"image": torch.randn(4, 3, 128, 128, generator=g), "rois": rois}, lambda out: F.cross_entropy(out, labels)


def _smp_unet():
    """segmentation_models_pytorch's U-Net over a ResNet-18 encoder (no weights), trained by its
    multi-class Dice loss plus cross-entropy over five classes."""
    torchvision_module()
    import segmentation_models_pytorch as smp

    torch.manual_seed(0)

    class Segmenter(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = smp.Unet("resnet18", encoder_weights=None, classes=5)
            self.dice = smp.losses.DiceLoss("multiclass")

        def forward(self, image, mask):
            logits = self.net(image)
            return self.dice(logits, mask) + F.cross_entropy(logits, mask)

    return Segmenter(), {"image": torch.randn(4, 3, 96, 96), "mask": torch.randint(0, 5, (4, 96, 96))}, _identity


def _lightly_dino():
    """lightly's DINO: a ResNet-18 student with DINO's projection head (weight-normalised last
    layer) against a teacher that follows it by a moving average, moved at the start of each
    training step; the teacher sees two global views, the student those and four local ones, and
    the loss (sharpened, centred teacher targets, its centre a moving average updated in place)
    compares each pair of different views."""
    tv = torchvision_module()
    from lightly.loss import DINOLoss
    from lightly.models.modules import DINOProjectionHead
    from lightly.models.utils import deactivate_requires_grad, update_momentum

    torch.manual_seed(0)

    def network():
        backbone = tv.models.resnet18(weights=None)
        backbone.fc = nn.Identity()
        return nn.Sequential(backbone, DINOProjectionHead(512, 256, 64, 512, freeze_last_layer=1))

    class Dino(nn.Module):
        def __init__(self):
            super().__init__()
            self.student, self.teacher = network(), network()  # (weight norm refuses deepcopy)
            self.teacher.load_state_dict(self.student.state_dict())
            deactivate_requires_grad(self.teacher)
            self.criterion = DINOLoss(output_dim=512, warmup_teacher_temp_epochs=0)

        def forward(self, global_views, local_views):
            if self.training:
                update_momentum(self.student, self.teacher, m=0.996)
            with torch.no_grad():
                targets = [self.teacher(v) for v in global_views.unbind(0)]
            outputs = [self.student(v) for v in (*global_views.unbind(0), *local_views.unbind(0))]
            return self.criterion(targets, outputs, epoch=0)

    return Dino(), {"global_views": torch.randn(2, 4, 3, 64, 64), "local_views": torch.randn(4, 4, 3, 32, 32)}, _identity


def _ddpm():
    """denoising-diffusion-pytorch's Gaussian diffusion over its U-Net (ResNet blocks, linear and
    full attention): each sample's time step and noise drawn inside the step, the schedule's
    coefficients gathered at those steps, the noised image's noise predicted, and the loss
    weighted per sample. Its inference is the same loss, evaluated."""
    torchvision_module()
    from denoising_diffusion_pytorch import GaussianDiffusion, Unet

    torch.manual_seed(0)

    class Diffusion(nn.Module):
        def __init__(self):
            super().__init__()
            self.diffusion = GaussianDiffusion(Unet(dim=16, dim_mults=(1, 2, 4), flash_attn=False), image_size=32,
                                               timesteps=1000)  # fmt: skip

        def forward(self, img):
            return self.diffusion(img)

    return Diffusion(), {"img": torch.rand(8, 3, 32, 32)}, _identity


def _efficientnet():
    """efficientnet_pytorch's EfficientNet-B0 (no weights), its swish a memory-efficient
    ``autograd.Function`` (the forward saves the input alone and runs without grad mode), with
    squeeze-and-excitation and static same padding; a classifier's cross-entropy."""
    from efficientnet_pytorch import EfficientNet

    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = EfficientNet.from_name("efficientnet-b0", num_classes=10, image_size=96)

        def forward(self, image, label):
            return F.cross_entropy(self.net(image), label)

    return Classifier(), {"image": torch.randn(8, 3, 96, 96), "label": torch.randint(0, 10, (8,))}, _identity


def _torchrl_sac():
    """TorchRL's SAC loss over a replay batch held in a TensorDict: a tanh-normal actor (its
    action sampled by reparametrisation in the step), two Q-networks run as one by ``vmap`` over
    their stacked parameters (tensordict's functional calls), their target copies moved by a soft
    update at the start of each training step, and the entropy's temperature learnt."""
    import warnings

    from tensordict import TensorDict
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    torch.manual_seed(0)
    obs, act = 17, 6

    def mlp(n_in, n_out):
        return nn.Sequential(nn.Linear(n_in, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, n_out))

    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp(obs + act, 1)

        def forward(self, observation, action):
            return self.net(torch.cat([observation, action], -1))

    policy = TensorDictModule(nn.Sequential(mlp(obs, 2 * act), NormalParamExtractor()), in_keys=["observation"],
                              out_keys=["loc", "scale"])  # fmt: skip
    actor = ProbabilisticActor(policy, in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (no target updater yet: it is made below)
        loss = SACLoss(actor, ValueOperator(Critic(), in_keys=["observation", "action"]), num_qvalue_nets=2,
                       target_entropy=-float(act))  # fmt: skip
    updater = SoftUpdate(loss, eps=0.995)

    class Sac(nn.Module):
        def __init__(self):
            super().__init__()
            self.loss = loss

        def forward(self, observation, action, next_observation, reward, done):
            if self.training:
                updater.step()
            batch = TensorDict({"observation": observation, "action": action,
                                "next": {"observation": next_observation, "reward": reward, "done": done,
                                         "terminated": done}}, batch_size=[observation.shape[0]])  # fmt: skip
            out = self.loss(batch)
            return out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]

    n = 256
    return Sac(), {"observation": torch.randn(n, obs), "action": torch.rand(n, act) * 2 - 1,
                   "next_observation": torch.randn(n, obs), "reward": torch.randn(n, 1),
                   "done": torch.rand(n, 1) < 0.05}, _identity  # fmt: skip


def _bs_roformer():
    """BS-RoFormer, a music source separator: the mixture's STFT (complex, as real pairs), its
    frequencies split into bands each projected on its own, axial transformers over time and
    over bands with rotary positions, a mask estimated per band, the inverse STFT, and a loss
    over the waveform and multi-resolution spectra."""
    from bs_roformer import BSRoformer

    torch.manual_seed(0)

    class Separator(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = BSRoformer(dim=32, depth=1, time_transformer_depth=1, freq_transformer_depth=1, stereo=False,
                                  num_stems=1)  # fmt: skip

        def forward(self, audio, target):
            return self.net(audio, target=target)

    return Separator(), {"audio": torch.randn(2, 11025), "target": torch.randn(2, 11025)}, _identity


def _tltorch():
    """tensorly-torch's factorized layers: a convolution whose kernel is kept as CP factors and
    applied factor by factor, and a linear layer whose weight is a CP tensor over factored
    features (an einsum of its factors), in a small image classifier."""
    import tltorch

    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = tltorch.FactorizedConv.from_conv(nn.Conv2d(3, 32, 3, padding=1), rank=0.5, factorization="cp",
                                                         implementation="factorized")  # fmt: skip
            self.fc = tltorch.FactorizedLinear(in_tensorized_features=(8, 8, 8), out_tensorized_features=(2, 5),
                                               factorization="cp", rank=0.3)  # fmt: skip

        def forward(self, image, label):
            h = F.adaptive_avg_pool2d(F.relu(self.conv(image)), 4).flatten(1)
            return F.cross_entropy(self.fc(h), label)

    return Classifier(), {"image": torch.randn(8, 3, 32, 32), "label": torch.randint(0, 10, (8,))}, _identity


def _colt5():
    """CoLT5's conditionally routed transformer block: light attention and feed-forward over
    every token, heavy ones over the tokens a router picks (top-k of learned scores, a
    data-dependent choice), their outputs scattered back."""
    from colt5_attention import ConditionalRoutedTransformerBlock

    torch.manual_seed(0)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = ConditionalRoutedTransformerBlock(
                dim=128, light_dim_head=32, light_heads=4, light_window_size=64, heavy_dim_head=32, heavy_heads=4,
                num_heavy_ff_tokens=64, num_heavy_attn_tokens_q=64, num_heavy_attn_tokens_kv=64)  # fmt: skip
            self.head = nn.Linear(128, 10)

        def forward(self, x, label):
            return F.cross_entropy(self.head(self.block(x).mean(1)), label)

    return Encoder(), {"x": torch.randn(4, 256, 128), "label": torch.randint(0, 10, (4,))}, _identity


def _navit():
    """vit-pytorch's NaViT: images of several resolutions packed into a few sequences (each
    image's patches attend within the image alone, a mask made from their image ids), factorised
    2-D position embeddings, token dropout in training (a random top-k of each image's
    patches) and attention pooling per image."""
    torchvision_module()  # (vit_pytorch's package imports it)
    from vit_pytorch.na_vit import NaViT

    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = NaViT(image_size=64, patch_size=8, num_classes=10, dim=128, depth=3, heads=4, mlp_dim=256,
                             token_dropout_prob=0.25)  # fmt: skip

        def forward(self, images, label):
            # (four resolutions cut from one batch, packed two to a sequence)
            packs = [[images[0, :, :64, :64], images[1, :, :32, :48]], [images[2, :, :48, :32], images[3, :, :64, :32]]]
            return F.cross_entropy(self.vit(packs), label)

    return Classifier(), {"images": torch.randn(4, 3, 64, 64), "label": torch.randint(0, 10, (4,))}, _identity


def _max_vit():
    """vit-pytorch's MaxViT: MBConv blocks (depthwise convolutions, squeeze-and-excitation), then
    attention within local windows and across a dilated grid, each with a relative position bias
    looked up from a table by precomputed indices; dropout in training."""
    torchvision_module()
    from vit_pytorch.max_vit import MaxViT

    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = MaxViT(num_classes=10, dim_conv_stem=32, dim=32, dim_head=16, depth=(1, 1), window_size=4,
                              mbconv_expansion_rate=4, mbconv_shrinkage_rate=0.25, dropout=0.1)  # fmt: skip

        def forward(self, image, label):
            return F.cross_entropy(self.vit(image), label)

    return Classifier(), {"image": torch.randn(8, 3, 64, 64), "label": torch.randint(0, 10, (8,))}, _identity


def _schnetpack_painn():
    """schnetpack's PaiNN potential over a batch of four 10-atom molecules (every pair of a
    molecule's atoms a neighbour pair), trained on energies and forces: the forces are the
    negative gradient of the energy with respect to the positions, taken with create_graph in
    training (the loss's backward goes through it); inference takes them too, as a simulation does.
    Message passing gathers by the pairs' atom indices and sums back by ``index_add``."""
    import typing

    import torch.utils.data.dataloader as loader

    if not hasattr(loader, "T_co"):  # (schnetpack 2.0's data loader imports a name torch 2.13 dropped)
        loader.T_co = typing.TypeVar("T_co", covariant=True)
    import schnetpack as spk
    import schnetpack.properties as props

    torch.manual_seed(0)
    cutoff = 5.0

    class Potential(nn.Module):
        def __init__(self):
            super().__init__()
            painn = spk.representation.PaiNN(n_atom_basis=64, n_interactions=3, radial_basis=spk.nn.GaussianRBF(n_rbf=20, cutoff=cutoff),
                                             cutoff_fn=spk.nn.CosineCutoff(cutoff))  # fmt: skip
            self.net = spk.model.NeuralNetworkPotential(
                representation=painn, input_modules=[spk.atomistic.PairwiseDistances()],
                output_modules=[spk.atomistic.Atomwise(n_in=64, output_key="energy"),
                                spk.atomistic.Forces(energy_key="energy", force_key="forces")])  # fmt: skip

        def forward(self, numbers, positions, idx_i, idx_j, idx_m, n_atoms, offsets, energy, forces):
            with torch.enable_grad():
                out = self.net({props.Z: numbers, props.R: positions, props.idx_i: idx_i, props.idx_j: idx_j,
                                props.idx_m: idx_m, props.n_atoms: n_atoms, props.offsets: offsets})  # fmt: skip
                return F.mse_loss(out["energy"], energy) + F.mse_loss(out["forces"], forces)

    molecules, atoms = 4, 10
    pairs = [(m * atoms + a, m * atoms + b) for m in range(molecules) for a in range(atoms) for b in range(atoms) if a != b]
    idx_i, idx_j = torch.tensor(pairs).T.contiguous()
    numbers = torch.tensor([1, 6, 7, 8])[torch.randint(0, 4, (molecules * atoms,))]
    return Potential(), {"numbers": numbers, "positions": torch.randn(molecules * atoms, 3) * 1.2, "idx_i": idx_i,
                         "idx_j": idx_j, "idx_m": torch.arange(molecules).repeat_interleave(atoms),
                         "n_atoms": torch.full((molecules,), atoms), "offsets": torch.zeros(len(pairs), 3),
                         "energy": torch.randn(molecules), "forces": torch.randn(molecules * atoms, 3)}, _identity  # fmt: skip


def _kbnufft_recon():
    """An MRI reconstruction by torchkbnufft: the adjoint non-uniform FFT of radial k-space samples
    (Kaiser-Bessel interpolation onto an oversampled grid, by its table, then an FFT), a residual
    CNN over the complex image's real and imaginary parts, and a loss of data consistency (the
    forward NUFFT of the result against the samples) and of the image against its target."""
    # torchkbnufft's TorchScript functions compile as it is imported, binding the
    # ``torch.index_select`` they find: where PyTorch Geometric is imported (the zoo imports it),
    # that is its Python wrapper, which TorchScript refuses. They compile against torch's own.
    index_select = torch.index_select
    torch.index_select = torch._C._VariableFunctions.index_select
    try:
        import torchkbnufft as tkbn
    finally:
        torch.index_select = index_select

    torch.manual_seed(0)
    size = (48, 48)

    class Recon(nn.Module):
        def __init__(self):
            super().__init__()
            self.forward_op, self.adjoint = tkbn.KbNufft(im_size=size), tkbn.KbNufftAdjoint(im_size=size)
            self.cnn = nn.Sequential(nn.Conv2d(2, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                                     nn.Conv2d(32, 2, 3, padding=1))  # fmt: skip

        def forward(self, kdata, ktraj, target):
            image = self.adjoint(kdata, ktraj)  # (batch, coil, *size), complex
            parts = torch.view_as_real(image[:, 0]).permute(0, 3, 1, 2)
            fixed = torch.view_as_complex((parts + self.cnn(parts)).permute(0, 2, 3, 1).contiguous()).unsqueeze(1)
            consistency = torch.view_as_real(self.forward_op(fixed, ktraj) - kdata).square().mean()
            return consistency + torch.view_as_real(fixed - target).square().mean()

    model = Recon()
    spokes, samples = 24, 96  # (a radial trajectory: spokes through the centre of k-space)
    angles = torch.arange(spokes) * (math.pi / spokes)
    radius = torch.linspace(-math.pi, math.pi * (1 - 2 / samples), samples)
    ktraj = torch.stack([(radius[None] * angles.cos()[:, None]).flatten(), (radius[None] * angles.sin()[:, None]).flatten()])
    return model, {"kdata": torch.randn(2, 1, spokes * samples, dtype=torch.complex64), "ktraj": ktraj,
                   "target": torch.randn(2, 1, *size, dtype=torch.complex64)}, _identity  # fmt: skip


def _sam_small():
    """A small Segment Anything (segment-anything's modules, no weights): a ViT image encoder with
    windowed attention, decomposed relative positions and global blocks; a prompt encoder of
    points (their labels pick the embedding added, by boolean masks) and boxes, its positions random
    Fourier features; the two-way transformer mask decoder with three masks and their IoU scores
    per prompt; trained on a focal and dice loss against target masks, as its fine-tuning is."""
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, TwoWayTransformer

    torch.manual_seed(0)

    class Sam(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = ImageEncoderViT(img_size=128, patch_size=16, embed_dim=96, depth=4, num_heads=3, out_chans=64,
                                           qkv_bias=True, use_rel_pos=True, window_size=4, global_attn_indexes=(1, 3))  # fmt: skip
            self.prompts = PromptEncoder(embed_dim=64, image_embedding_size=(8, 8), input_image_size=(128, 128), mask_in_chans=16)
            self.decoder = MaskDecoder(num_multimask_outputs=3, transformer=TwoWayTransformer(depth=2, embedding_dim=64, mlp_dim=256, num_heads=4),
                                       transformer_dim=64, iou_head_depth=3, iou_head_hidden_dim=64)  # fmt: skip

        def forward(self, image, points, labels, boxes, masks):
            loss = 0.0
            for emb, pts, lab, box, target in zip(self.encoder(image), points, labels, boxes, masks):
                sparse, dense = self.prompts(points=(pts, lab), boxes=box, masks=None)
                low, iou = self.decoder(emb[None], self.prompts.get_dense_pe(), sparse, dense, multimask_output=True)
                target = target[:, None].expand_as(low)
                focal = _sigmoid_focal(low, target)
                prob = low.sigmoid().flatten(2)
                dice = 1 - (2 * (prob * target.flatten(2)).sum(-1) + 1) / (prob.sum(-1) + target.flatten(2).sum(-1) + 1)
                loss = loss + focal + dice.mean() + F.mse_loss(iou, torch.rand_like(iou))
            return loss

    batch, prompts = 2, 3
    return Sam(), {"image": torch.randn(batch, 3, 128, 128), "points": torch.rand(batch, prompts, 2, 2) * 128,
                   "labels": torch.randint(0, 2, (batch, prompts, 2)), "boxes": torch.rand(batch, prompts, 4) * 128,
                   "masks": (torch.rand(batch, prompts, 32, 32) > 0.7).float()}, _identity  # fmt: skip


def _sigmoid_focal(logits: torch.Tensor, target: torch.Tensor, alpha: float = 0.25, gamma: float = 2.0) -> torch.Tensor:
    """The sigmoid focal loss (as torchvision.ops writes it), averaged."""
    prob = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = prob * target + (1 - prob) * (1 - target)
    return ((alpha * target + (1 - alpha) * (1 - target)) * ce * (1 - p_t) ** gamma).mean()


def _timm(name: str, **kw):
    """A timm image classifier built by name (no weights) at 64 x 64, trained by cross-entropy over
    ten classes: EVA-02 (rotary position embeddings in 2-D, SwiGLU), NF-RegNet (no normalisation
    layers: scaled weight-standardised convolutions, squeeze-and-excitation, skip gains) or
    EfficientFormerV2 (convolutional stages, then attention with talking heads and a learnt bias)."""
    torchvision_module()  # (timm imports it)
    import timm

    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = timm.create_model(name, pretrained=False, num_classes=10, **kw)

        def forward(self, image, label):
            return F.cross_entropy(self.net(image), label)

    return Classifier(), {"image": torch.randn(8, 3, 64, 64), "label": torch.randint(0, 10, (8,))}, _identity


def _open_clip_coca():
    """open_clip's CoCa: a ViT whose tokens an attentional pooler gathers, a causal text tower with a
    class token, and a multimodal decoder that cross-attends the image's tokens; trained by its
    contrastive loss (the batch's pairs, a learnt temperature) and a captioning loss over the text
    shifted by one."""
    torchvision_module()  # (open_clip imports it)
    from open_clip.coca_model import CoCa
    from open_clip.loss import CoCaLoss

    torch.manual_seed(0)
    width, context, vocab = 128, 24, 1000
    text = dict(context_length=context, vocab_size=vocab, width=width, heads=4, layers=2, embed_cls=True, output_tokens=True)

    class Captioner(nn.Module):
        def __init__(self):
            super().__init__()
            self.coca = CoCa(embed_dim=width, text_cfg=text,
                             vision_cfg=dict(image_size=64, layers=2, width=width, patch_size=16, head_width=32,
                                             attentional_pool=True, attn_pooler_heads=4, output_tokens=True),
                             multimodal_cfg=dict(context_length=context, vocab_size=vocab, width=width, heads=4, layers=2,
                                                 attn_pooler_heads=4))  # fmt: skip
            self.loss = CoCaLoss(caption_loss_weight=2.0, clip_loss_weight=1.0)

        def forward(self, image, text):
            out = self.coca(image, text)
            return sum(self.loss(out["image_features"], out["text_features"], out["logits"], out["labels"], out["logit_scale"]))

    return Captioner(), {"image": torch.randn(8, 3, 64, 64), "text": torch.randint(1, vocab, (8, context))}, _identity


def _widedeep_tab_transformer():
    """pytorch-widedeep's TabTransformer over a table of six categorical columns (each column's
    ids through its own embedding) and four continuous ones, beside a wide linear part over the
    crossed categories; a binary classifier trained by BCE."""
    import numpy as np
    from pytorch_widedeep.models import TabTransformer, Wide, WideDeep

    torch.manual_seed(0)
    cards = [12, 40, 7, 100, 25, 3]
    columns = {f"c{i}": i for i in range(len(cards))} | {f"x{i}": len(cards) + i for i in range(4)}

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            deep = TabTransformer(column_idx=columns, cat_embed_input=[(f"c{i}", n + 1, 16) for i, n in enumerate(cards)],
                                  continuous_cols=[f"x{i}" for i in range(4)], input_dim=16, n_heads=4, n_blocks=2)  # fmt: skip
            self.model = WideDeep(wide=Wide(input_dim=int(np.sum(cards)) + 1, pred_dim=1), deeptabular=deep)

        def forward(self, wide, tab, target):
            return F.binary_cross_entropy_with_logits(self.model({"wide": wide, "deeptabular": tab}).squeeze(1), target)

    batch = 256
    cats = torch.stack([torch.randint(1, n + 1, (batch,)) for n in cards], 1)
    offsets = torch.tensor([0, *np.cumsum(cards)[:-1].tolist()])
    tab = torch.cat([cats.float(), torch.randn(batch, 4)], 1)
    return Classifier(), {"wide": cats + offsets, "tab": tab, "target": torch.randint(0, 2, (batch,)).float()}, _identity


def _enformer():
    """enformer-pytorch's Enformer (small): a convolutional stem and tower with attention pooling
    over one-hot DNA, transformer layers with relative positions from exponential, central-mask and
    gamma features, and Poisson losses over the targets of a species' tracks."""
    from enformer_pytorch import Enformer

    torch.manual_seed(0)

    class Genomic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Enformer.from_hparams(dim=96, depth=2, heads=4, output_heads=dict(human=32), target_length=16,
                                             num_downsamples=5, dim_divisible_by=16)  # fmt: skip

        def forward(self, seq, target):
            return self.net(seq, target=target, head="human")

    return Genomic(), {"seq": torch.randint(0, 4, (2, 512)), "target": torch.rand(2, 16, 32)}, _identity



def _pypose_lm():
    """pypose's Levenberg-Marquardt on a pose graph, inside the step (inference only: the graph's
    poses are fitted, not trained by gradients): SE(3) poses as LieTensors (a tensor subclass),
    relative-pose residuals by the group's inverse, product and logarithm, their Jacobian by
    ``torch.func`` over the poses, and the damped normal equations solved, twice from the same start
    each call."""
    import pypose as pp

    torch.manual_seed(0)

    class Graph(nn.Module):
        def __init__(self, poses):
            super().__init__()
            self.poses = pp.Parameter(poses)

        def forward(self, edges, measured):
            return (measured.Inv() @ self.poses[edges[:, 0]].Inv() @ self.poses[edges[:, 1]]).Log().tensor()

    class Fit(nn.Module):
        def __init__(self, truth):
            super().__init__()
            self.register_buffer("start", (truth * pp.randn_SE3(len(truth), sigma=0.1)).tensor())
            # (held outside the module's parameters: the step fits them; nothing trains them)
            self.__dict__["graph"] = Graph(pp.SE3(self.start.clone()))

        def forward(self, edges, measured):
            with torch.no_grad():
                self.graph.poses.data.copy_(self.start)
            # (a new solver each call: the trust region's damping it keeps would steer the next call)
            solver = pp.optim.LM(self.graph, strategy=pp.optim.strategy.TrustRegion())
            for _ in range(2):
                error = solver.step(input=(edges, pp.SE3(measured)))
            return error

    nodes = 48
    truth = pp.randn_SE3(nodes)
    chain = torch.stack([torch.arange(nodes - 1), torch.arange(1, nodes)], 1)
    closures = torch.randint(0, nodes, (nodes, 2))
    closures = closures[closures[:, 0] != closures[:, 1]]
    edges = torch.cat([chain, closures])
    measured = truth[edges[:, 0]].Inv() @ truth[edges[:, 1]] * pp.randn_SE3(len(edges), sigma=0.01)
    return Fit(truth), {"edges": edges, "measured": measured.tensor()}, _identity


def _compressai_hyperprior():
    """compressai's scale hyperprior (Ballé et al. 2018): GDN layers, an entropy bottleneck (its
    cumulative logits by softplus matrices; uniform noise as quantization in training, rounding
    to its medians in inference) and a Gaussian conditional over the scales the hyperprior
    decodes, trained by rate and distortion, the bottleneck's quantiles by its auxiliary loss."""
    from compressai.models import ScaleHyperprior

    torch.manual_seed(0)

    class Codec(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = ScaleHyperprior(N=48, M=64)

        def forward(self, image):
            out = self.net(image)
            pixels = image.shape[0] * image.shape[2] * image.shape[3]
            bpp = sum(lik.log().sum() for lik in out["likelihoods"].values()) / (-math.log(2) * pixels)
            return bpp + 0.01 * 255**2 * F.mse_loss(out["x_hat"], image) + self.net.aux_loss()

    return Codec(), {"image": torch.rand(2, 3, 64, 64)}, _identity


def _pytorch_forecasting_tft():
    """pytorch-forecasting's Temporal Fusion Transformer: variable selection networks of gated
    residual units, LSTM encoder and decoder over encoder lengths that vary through the batch
    (packed sequences), interpretable multi-head attention and a quantile loss, on a batch its
    TimeSeriesDataSet makes from a table of series."""
    import pandas as pd
    from pytorch_forecasting import TemporalFusionTransformer, TimeSeriesDataSet
    from pytorch_forecasting.metrics import QuantileLoss

    torch.manual_seed(0)
    series, steps = 12, 64
    t = torch.arange(steps, dtype=torch.float64)
    table = pd.DataFrame({
        "series": [str(g) for g in range(series) for _ in range(steps)],
        "time": [int(i) for _ in range(series) for i in range(steps)],
        "value": torch.cat([torch.sin(t / (3 + g)) * (1 + g / 4) + 0.1 * torch.randn(steps, dtype=torch.float64)
                            for g in range(series)]).numpy(),
        "weekday": [str(i % 7) for _ in range(series) for i in range(steps)],
    })  # fmt: skip
    data = TimeSeriesDataSet(table, time_idx="time", target="value", group_ids=["series"], max_encoder_length=24,
                             min_encoder_length=12, max_prediction_length=6, static_categoricals=["series"],
                             time_varying_known_categoricals=["weekday"], time_varying_known_reals=["time"],
                             time_varying_unknown_reals=["value"])  # fmt: skip
    tft = TemporalFusionTransformer.from_dataset(data, hidden_size=32, attention_head_size=4, hidden_continuous_size=16,
                                                 dropout=0.1, loss=QuantileLoss())  # fmt: skip
    torch.manual_seed(1)
    x, (y, _) = next(iter(data.to_dataloader(train=True, batch_size=32, num_workers=0)))

    class Forecast(nn.Module):
        def __init__(self):
            super().__init__()
            self.tft = tft

        def forward(self, target, **batch):
            return self.tft.loss(self.tft(batch)["prediction"], target)

    return Forecast(), {"target": y, **x}, _identity


def _equiformer():
    """equiformer-pytorch: an SE(3)-equivariant graph attention network over a point cloud's
    nearest neighbours (spherical harmonics and Wigner-D bases of the relative positions, tensor
    products of degrees 0-2 split into heads, attention by the distance of keys from queries)."""
    from equiformer_pytorch import Equiformer

    torch.manual_seed(0)

    class Points(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Equiformer(num_tokens=24, dim=(32, 16, 8), dim_head=(16, 8, 8), heads=(2, 2, 2), num_degrees=3,
                                  depth=2, num_neighbors=8, reduce_dim_out=True)  # fmt: skip

        def forward(self, atoms, coors, mask):
            out = self.net(atoms, coors, mask)
            return out.type0.square().mean() + out.type1.square().mean()

    return Points(), {"atoms": torch.randint(0, 24, (2, 48)), "coors": torch.randn(2, 48, 3),
                      "mask": torch.ones(2, 48, dtype=torch.bool)}, _identity  # fmt: skip


def _galore(params):
    """GaLore's AdamW (galore-torch): the matrices' gradients projected on their top singular
    vectors (an SVD of each gradient, here every step), Adam in that low-rank space, projected
    back; the other parameters by plain AdamW."""
    from galore_torch import GaLoreAdamW

    params = list(params)
    matrices = [p for p in params if p.dim() == 2 and min(p.shape) > 8]
    rest = [p for p in params if not any(p is m for m in matrices)]
    return GaLoreAdamW([{"params": rest}, {"params": matrices, "rank": 8, "update_proj_gap": 1, "scale": 0.25,
                                           "proj_type": "std"}], lr=1e-3)  # fmt: skip


#: Small molecules for chemprop's batch (SMILES), each a different shape of graph.
_MOLECULES = ("CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CC(C)Cc1ccc(cc1)C(C)C(=O)O", "C1CCC(CC1)N", "O=C(O)c1ccccc1OC(C)=O",
              "CN1C=NC2=C1C(=O)N(C(=O)N2C)C", "CCN(CC)CC", "c1ccc2ccccc2c1", "OC1C(O)C(O)C(O)C(O)C1O", "CC#N",
              "ClC(Cl)Cl", "CC(C)(C)OC(=O)N1CCCC1C(=O)O", "c1ccncc1", "NC(Cc1ccccc1)C(=O)O", "CCCCCCCCCCCCCCCC(=O)O")  # fmt: skip


def _chemprop_mpnn():
    """chemprop 2's directed message-passing network (D-MPNN) over a batch of molecules from
    SMILES: messages on bonds, each excluding its reverse bond's (an index of the reverse edges),
    summed into atoms by index, a mean over each molecule's atoms, batch norm and a regression FFN."""
    from chemprop import data, featurizers, models
    from chemprop import nn as cnn
    from chemprop.data.collate import BatchMolGraph

    torch.manual_seed(0)
    points = [data.MoleculeDatapoint.from_smi(s, y=[float(i % 5)]) for i, s in enumerate(_MOLECULES * 2)]
    batch = data.collate_batch(list(data.MoleculeDataset(points, featurizers.SimpleMoleculeMolGraphFeaturizer())))
    bmg, targets = batch[0], batch[3]

    class Molecules(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = models.MPNN(cnn.BondMessagePassing(d_h=128, depth=3), cnn.MeanAggregation(),
                                   cnn.RegressionFFN(input_dim=128, hidden_dim=128), batch_norm=True)  # fmt: skip

        def forward(self, V, E, edge_index, rev_edge_index, batch, targets):
            graph = object.__new__(BatchMolGraph)
            graph.V, graph.E, graph.edge_index, graph.rev_edge_index, graph.batch = V, E, edge_index, rev_edge_index, batch
            return F.mse_loss(self.net(graph), targets)

    return Molecules(), {"V": bmg.V, "E": bmg.E, "edge_index": bmg.edge_index, "rev_edge_index": bmg.rev_edge_index,
                         "batch": bmg.batch, "targets": targets}, _identity  # fmt: skip


def _litgpt():
    """LitGPT's GPT in a Llama layout of its own code (grouped-query attention, rotary positions
    on part of each head, RMS norm, a SwiGLU MLP), its chunked cross-entropy over token ids."""
    from litgpt.config import Config
    from litgpt.model import GPT
    from litgpt.utils import chunked_cross_entropy

    torch.manual_seed(0)
    cfg = Config(block_size=128, vocab_size=1000, padded_vocab_size=1024, n_layer=2, n_head=8, n_query_groups=2,
                 n_embd=256, rotary_percentage=0.5, parallel_residual=False, bias=False, norm_class_name="RMSNorm",
                 mlp_class_name="LLaMAMLP", intermediate_size=512)  # fmt: skip

    class Lit(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = GPT(cfg)

        def forward(self, tokens):
            return chunked_cross_entropy(self.net(tokens[:, :-1]), tokens[:, 1:], chunk_size=32)

    return Lit(), {"tokens": torch.randint(0, 1000, (4, 97))}, _identity


def _deepwave_fwi():
    """deepwave's full-waveform inversion: a 2-D velocity model's scalar wave propagation, which its
    C library steps in time through ctypes, outside PyTorch's operators, against the receivers'
    recorded data. The trace holds the operators around it; the time in C is the original's
    alone, which the replay's report has to name."""
    import deepwave

    torch.manual_seed(0)

    class Inversion(nn.Module):
        def __init__(self):
            super().__init__()
            self.velocity = nn.Parameter(1500 + 500 * torch.rand(48, 64))

        def forward(self, amplitudes, sources, receivers, observed):
            out = deepwave.scalar(self.velocity, 5.0, 0.001, source_amplitudes=amplitudes, source_locations=sources,
                                  receiver_locations=receivers, pml_width=8)  # fmt: skip
            return F.mse_loss(out[-1], observed)

    shots, receivers, steps = 2, 16, 160
    wavelet = deepwave.wavelets.ricker(25, steps, 0.001, 0.04)
    return Inversion(), {
        "amplitudes": wavelet.repeat(shots, 1, 1),
        "sources": torch.tensor([[[0, 16]], [[0, 48]]]),
        "receivers": torch.stack([torch.zeros(receivers, dtype=torch.long), torch.arange(receivers) * 4], 1).repeat(shots, 1, 1),
        "observed": torch.randn(shots, receivers, steps) * 1e-3}, _identity  # fmt: skip


def _torchscale_retnet():
    """torchscale's RetNet decoder: multi-scale retention (decay masks per head, xPos rotations,
    group norm) in its parallel form, with gated linear units, as a language model's loss."""
    from torchscale.architecture.config import RetNetConfig
    from torchscale.architecture.retnet import RetNetDecoder

    torch.manual_seed(0)
    cfg = RetNetConfig(decoder_embed_dim=128, decoder_value_embed_dim=256, decoder_retention_heads=4,
                       decoder_ffn_embed_dim=256, decoder_layers=2, vocab_size=1000, dropout=0.0)  # fmt: skip

    class Retention(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = RetNetDecoder(cfg, embed_tokens=nn.Embedding(1000, 128))

        def forward(self, tokens):
            logits, _ = self.net(tokens[:, :-1])
            return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    return Retention(), {"tokens": torch.randint(0, 1000, (4, 97))}, _identity


def _mup():
    """mup's maximal update parametrization: an MLP whose readout is a ``MuReadout`` and whose
    parameters carry infinite-width shapes against a narrower base model, trained by ``MuAdamW``
    (learning rates scaled per parameter by its width multiplier)."""
    import mup

    def mlp(width):
        return nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                             mup.MuReadout(width, 10))  # fmt: skip

    torch.manual_seed(0)
    net = mlp(512)
    mup.set_base_shapes(net, mlp(64), delta=mlp(128))
    for layer in net:
        if isinstance(layer, nn.Linear) and not isinstance(layer, mup.MuReadout):
            mup.init.kaiming_uniform_(layer.weight, a=5**0.5)
    return (_Classified(net), {"x": torch.randn(64, 64), "labels": torch.randint(0, 10, (64,))}, _identity,
            lambda params: mup.MuAdamW(params, lr=1e-3))  # fmt: skip


def _torchdyn_node():
    """torchdyn's neural ODE: a vector field integrated by Dormand-Prince with adaptive steps,
    its gradient by the adjoint method (a second ODE solved backwards inside the backward pass,
    through an autograd Function), over a batch of 2-D points classified at the end time. Its
    training's work grows as the field learns (more solver steps): the capture names it."""
    from torchdyn.core import NeuralODE

    torch.manual_seed(0)

    class Flow(nn.Module):
        def __init__(self):
            super().__init__()
            field = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
            self.ode = NeuralODE(field, sensitivity="adjoint", solver="dopri5", atol=1e-4, rtol=1e-4,
                                 atol_adjoint=1e-4, rtol_adjoint=1e-4, return_t_eval=False)  # fmt: skip
            self.head = nn.Linear(2, 2)

        def forward(self, points, labels, t_span):
            return F.cross_entropy(self.head(self.ode(points, t_span)[-1]), labels)

    points = torch.randn(256, 2)
    return Flow(), {"points": points, "labels": (points.norm(dim=1) > 1).long(), "t_span": torch.linspace(0, 1, 2)}, _identity


def _megabyte():
    """MEGABYTE (lucidrains' MEGABYTE-pytorch): a multiscale byte-level language model, a global
    transformer over patches of 8 bytes and a local one within each patch, its loss over the
    next bytes."""
    from MEGABYTE_pytorch import MEGABYTE

    torch.manual_seed(0)

    class Bytes(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = MEGABYTE(num_tokens=256, dim=(128, 64), depth=(2, 2), max_seq_len=(16, 8), dim_head=32, heads=4,
                                flash_attn=False)  # fmt: skip

        def forward(self, data):
            return self.net(data, return_loss=True)

    return Bytes(), {"data": torch.randint(0, 256, (4, 128))}, _identity


def _rechub_mmoe():
    """torch-rechub's MMoE: a multi-gate mixture of experts over embedded sparse features (tables
    looked up by ids of a power law) and dense ones, a click and a conversion tower, each by
    binary cross-entropy."""
    from torch_rechub.basic.features import DenseFeature, SparseFeature
    from torch_rechub.models.multi_task import MMOE

    torch.manual_seed(0)
    sparse = [SparseFeature(f"c{i}", vocab_size=2000, embed_dim=16) for i in range(8)]
    dense = [DenseFeature(f"d{i}") for i in range(4)]

    class Tasks(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = MMOE(sparse + dense, ["classification", "classification"], n_expert=4,
                            expert_params={"dims": [128, 64]},
                            tower_params_list=[{"dims": [32]}, {"dims": [32]}])  # fmt: skip

        def forward(self, click, convert, **features):
            out = self.net(features)
            return F.binary_cross_entropy(out[:, 0], click) + F.binary_cross_entropy(out[:, 1], convert)

    batch = 256
    ids = {f.name: (torch.rand(batch).pow(3) * 2000).long() for f in sparse}
    values = {f.name: torch.rand(batch) for f in dense}
    return Tasks(), {**ids, **values, "click": (torch.rand(batch) > 0.8).float(),
                     "convert": (torch.rand(batch) > 0.95).float()}, _identity  # fmt: skip


def _norse_snn():
    """norse: a spiking network of leaky integrate-and-fire layers over 32 time steps (a whole
    sequence per call, its state threaded through), read out by a leaky integrator and trained
    through its surrogate gradient (SuperSpike)."""
    import norse.torch as norse

    torch.manual_seed(0)

    class Spiking(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = norse.SequentialState(nn.Linear(64, 128), norse.LIF(), nn.Linear(128, 10), norse.LI())

        def forward(self, spikes, labels):
            out, _ = self.net(spikes)
            return F.cross_entropy(out.max(0).values, labels)

    return Spiking(), {"spikes": (torch.rand(32, 16, 64) < 0.2).float(), "labels": torch.randint(0, 10, (16,))}, _identity


def torchaudio_module():
    """torchaudio, imported. PyPI's torchaudio (2.11, its last release) is a CUDA build whose C
    library does not load beside torch's CPU build, and its import fails there. Its Python parts
    (the transforms the steps here use: spectrograms, mel filter banks) need none of it, so where
    the library fails to load the import is made again with the extension's loader answering that
    no library is there, as it does for a build without one. Where it imports as it is, it is left
    alone."""
    try:
        import torchaudio
    except OSError as e:
        if "torchaudio" not in str(e):
            raise
        import importlib.util

        _unimport("torchaudio")
        where = importlib.util.find_spec("torchaudio").submodule_search_locations[0]
        spec = importlib.util.spec_from_file_location("torchaudio._extension.utils", f"{where}/_extension/utils.py")
        utils = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(utils)
        utils._load_lib = lambda lib: False
        sys.modules["torchaudio._extension.utils"] = utils
        import torchaudio
    return torchaudio


def _library_operators(module, namespace: str, *names: str):
    """``module()`` (:func:`torchvision_module`, :func:`torchaudio_module`), where the library's C
    part loaded and registers the operators ``names`` of ``namespace`` (``torchaudio::rnnt_loss``);
    else ModuleNotFoundError, which the zoo reports. PyPI's torchvision and torchaudio beside the
    CPU torch load none: their CUDA builds with a CUDA build of torch of their release do, and run
    them on the CPU (``pip install torch==2.14.1 torchvision==0.29.1``; for torchaudio, ``pip
    install torch==2.9.1 torchvision==0.24.1``, then ``torchaudio==2.9.*``)."""
    library = module()
    for name in names:
        try:
            getattr(getattr(torch.ops, namespace), name)
        except (AttributeError, RuntimeError):
            raise ModuleNotFoundError(f"{namespace}'s C library did not load beside this torch: no {namespace}::{name} "
                                      f"(a build of {namespace} for it is needed)") from None  # fmt: skip
    return library


def _torchaudio_rnnt():
    """torchaudio's Emformer RNN-T (a small one) trained by its RNN-T loss
    (``torchaudio::rnnt_loss``: the joint network's logits over every frame and label position,
    the lengths of each utterance's frames and labels), utterances of different lengths. Its
    inference is the transcriber and predictor's forward pass with the joint network."""
    ta = _library_operators(torchaudio_module, "torchaudio", "rnnt_loss")
    torch.manual_seed(0)
    model = ta.models.emformer_rnnt_model(
        input_dim=40, encoding_dim=64, num_symbols=32, segment_length=8, right_context_length=2,
        time_reduction_input_dim=64, time_reduction_stride=2, transformer_num_heads=4, transformer_ffn_dim=128,
        transformer_num_layers=2, transformer_dropout=0.1, transformer_activation="gelu",
        transformer_left_context_length=16, transformer_max_memory_size=0, transformer_weight_init_scale_strategy="depthwise",
        transformer_tanh_on_mem=True, symbol_embedding_dim=64, num_lstm_layers=2, lstm_layer_norm=True,
        lstm_layer_norm_epsilon=1e-3, lstm_dropout=0.1)  # fmt: skip

    class Transducer(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, features, lengths, labels, label_lengths):
            blanked = F.pad(labels, (1, 0), value=31)  # (the predictor reads the blank, then the labels)
            logits, frames, _, _ = self.model(features, lengths, blanked, label_lengths + 1)
            if not self.training:
                return logits
            return ta.functional.rnnt_loss(logits, labels.int(), frames.int(), label_lengths.int(), blank=31)

    g = torch.Generator().manual_seed(1)  # (the frames' lengths leave out the 2 of right context)
    return Transducer(), {"features": torch.randn(4, 66, 40, generator=g), "lengths": torch.tensor([64, 58, 50, 38]),
                          "labels": torch.randint(0, 31, (4, 12), generator=g),
                          "label_lengths": torch.tensor([12, 10, 9, 6])}, _identity  # fmt: skip


def _torchaudio_biquads():
    """A cascade of learnt biquad filters (torchaudio's ``lfilter``, its recursion in
    ``torchaudio::_lfilter_core_loop``, which writes its output in place, sample after sample,
    and again in the backward pass), their poles kept inside the unit circle by a tanh of their
    radius, in front of a small convolutional classifier of the filtered audio."""
    ta = _library_operators(torchaudio_module, "torchaudio", "_lfilter_core_loop")
    torch.manual_seed(0)

    class Biquads(nn.Module):
        def __init__(self, sections=3, channels=4):
            super().__init__()
            self.radius = nn.Parameter(torch.rand(sections, channels) * 2)
            self.angle = nn.Parameter(torch.rand(sections, channels) * math.pi)
            self.zeros = nn.Parameter(torch.randn(sections, channels, 3) * 0.5)
            self.net = nn.Sequential(nn.Conv1d(channels, 32, 9, stride=4), nn.ReLU(), nn.Conv1d(32, 32, 9, stride=4),
                                     nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 10))  # fmt: skip

        def forward(self, audio):
            x = audio.unsqueeze(1).expand(-1, self.radius.shape[1], -1)  # (batch, channels, samples)
            r = 0.95 * torch.tanh(self.radius)
            for k in range(self.radius.shape[0]):
                a = torch.stack([torch.ones_like(r[k]), -2 * r[k] * torch.cos(self.angle[k]), r[k] ** 2], -1)
                x = ta.functional.lfilter(x, a, self.zeros[k], clamp=False, batching=True)
            return self.net(x)

    labels = torch.randint(0, 10, (8,))
    return Biquads(), {"audio": torch.randn(8, 4000) * 0.1}, lambda out: F.cross_entropy(out, labels)


def _torchaudio_forced_align():
    """CTC forced alignment (``torchaudio::forced_align``, inference only): a small acoustic
    model's log-probabilities over 29 tokens aligned to a transcript by Viterbi, then each token's
    span and mean score."""
    ta = _library_operators(torchaudio_module, "torchaudio", "forced_align")
    torch.manual_seed(0)

    class Aligner(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv1d(40, 128, 5, padding=2), nn.GELU(), nn.Conv1d(128, 128, 5, padding=2),
                                     nn.GELU(), nn.Conv1d(128, 29, 1))  # fmt: skip

        def forward(self, features, transcript):
            log_probs = self.net(features).transpose(1, 2).log_softmax(-1)  # (1, frames, tokens)
            path, scores = ta.functional.forced_align(log_probs, transcript, blank=0)
            spans = ta.functional.merge_tokens(path[0], scores[0].exp())
            return torch.stack([torch.tensor([s.start, s.end]).float().mean() * s.score for s in spans]).sum()

    g = torch.Generator().manual_seed(1)
    return Aligner(), {"features": torch.randn(1, 40, 400, generator=g),
                       "transcript": torch.randint(1, 29, (1, 60), generator=g)}, _identity  # fmt: skip


def _torch_scatter_graphs():
    """torch_scatter's own operators over a batch of graphs: messages along edges reduced into
    their destination nodes by ``scatter_max`` (its argmax kept for the backward pass) and a sum,
    each graph's nodes pooled by a mean over its CSR segment (``segment_mean_csr``, its offsets
    the batch's pointer) and gathered back to its nodes (``gather_csr``), classified per graph.
    Its operators exist where torch_scatter was built for this torch (PyPI holds its source:
    ``pip install --no-build-isolation torch-scatter``)."""
    ts = _library_operators(lambda: __import__("torch_scatter"), "torch_scatter", "scatter_max", "segment_mean_csr",
                            "gather_csr")  # fmt: skip
    torch.manual_seed(0)

    class Readout(nn.Module):
        def __init__(self, features=32, hidden=64, classes=5):
            super().__init__()
            self.embed = nn.Linear(features, hidden)
            self.message = nn.ModuleList([nn.Linear(2 * hidden, hidden) for _ in range(3)])
            self.head = nn.Linear(2 * hidden, classes)

        def forward(self, x, src, dst, ptr):
            h = F.relu(self.embed(x))
            for layer in self.message:
                m = F.relu(layer(torch.cat([h[src], h[dst]], 1)))
                most, _ = ts.scatter_max(m, dst, dim=0, dim_size=h.shape[0])
                h = h + most + ts.scatter_sum(m, dst, dim=0, dim_size=h.shape[0]) / 8
            pooled = ts.segment_csr(h, ptr, reduce="mean")
            h = torch.cat([h, ts.gather_csr(pooled, ptr)], 1)
            return self.head(ts.segment_csr(h, ptr, reduce="max"))

    g = torch.Generator().manual_seed(1)
    sizes = torch.randint(20, 60, (16,), generator=g)
    ptr = F.pad(sizes.cumsum(0), (1, 0))
    graph = torch.repeat_interleave(torch.arange(16), sizes)  # each node's graph; edges stay inside graphs
    dst = torch.arange(int(ptr[-1])).repeat_interleave(8)
    src = ptr[graph[dst]] + (torch.rand(dst.shape[0], generator=g) * sizes[graph[dst]]).long()
    labels = torch.randint(0, 5, (16,), generator=g)
    return Readout(), {"x": torch.randn(int(ptr[-1]), 32, generator=g), "src": src, "dst": dst, "ptr": ptr}, \
        lambda out: F.cross_entropy(out, labels)  # fmt: skip


def _torch_sparse_gcn():
    """torch_sparse's own operators: a graph network over a ``SparseTensor`` adjacency made in the
    step from the edges' CSR layout (its transpose's pointers by ``ind2ptr``), propagated by its
    sparse-dense products with sum, mean and max reductions (``spmm_sum``, ``spmm_mean``,
    ``spmm_max``; the backward of the sum through the transpose). Its operators exist where
    torch_sparse was built for this torch (``pip install --no-build-isolation torch-sparse``,
    nine minutes here)."""
    tsp = _library_operators(lambda: __import__("torch_sparse"), "torch_sparse", "spmm_sum", "spmm_max", "ind2ptr")
    torch.manual_seed(0)
    nodes = 600

    class Propagate(nn.Module):
        def __init__(self, features=32, hidden=64, classes=7):
            super().__init__()
            self.embed = nn.Linear(features, hidden)
            self.layers = nn.ModuleList([nn.Linear(3 * hidden, hidden) for _ in range(2)])
            self.head = nn.Linear(hidden, classes)

        def forward(self, x, row, rowptr, col, weight):
            adj = tsp.SparseTensor(row=row, rowptr=rowptr, col=col, value=weight, sparse_sizes=(nodes, nodes),
                                   is_sorted=True, trust_data=True)  # fmt: skip
            h = F.relu(self.embed(x))
            for layer in self.layers:
                h = h + F.relu(layer(torch.cat([adj.matmul(h), tsp.matmul(adj, h, reduce="mean"),
                                                tsp.matmul(adj, h, reduce="max")], 1)))  # fmt: skip
            return self.head(h)

    g = torch.Generator().manual_seed(1)
    degree = torch.randint(2, 12, (nodes,), generator=g)
    row = torch.repeat_interleave(torch.arange(nodes), degree)
    col = torch.randint(0, nodes, (row.shape[0],), generator=g)
    labels = torch.randint(0, 7, (nodes,), generator=g)
    return Propagate(), {"x": torch.randn(nodes, 32, generator=g), "row": row, "rowptr": F.pad(degree.cumsum(0), (1, 0)),
                         "col": col, "weight": torch.rand(row.shape[0], generator=g)}, \
        lambda out: F.cross_entropy(out, labels)  # fmt: skip


def _torch_cluster_pointnet2():
    """PointNet++ over a batch of point clouds with torch_cluster's own operators: each set
    abstraction samples its centres by farthest point sampling (``torch_cluster::fps``, per cloud by
    the batch's pointer), groups the points within a radius of each (``radius``: pairs whose count
    the positions decide, at most 32 a centre) through PyG's PointNet convolution; features are
    interpolated back to the first level's points from their 3 nearest (``knn``), the clouds
    classified. Its operators exist where torch_cluster was built for this torch (PyPI holds its
    source: ``pip install --no-build-isolation torch-cluster``, ten minutes here)."""
    tc = _library_operators(lambda: __import__("torch_cluster"), "torch_cluster", "fps", "radius", "knn")
    import torch_geometric.nn as gnn

    torch.manual_seed(0)

    def mlp(*sizes):
        return nn.Sequential(*[m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())])

    class Abstraction(nn.Module):
        def __init__(self, ratio, r, net):
            super().__init__()
            self.ratio, self.r, self.conv = ratio, r, gnn.PointNetConv(net, add_self_loops=False)

        def forward(self, x, pos, batch):
            idx = tc.fps(pos, batch, ratio=self.ratio)
            row, col = tc.radius(pos, pos[idx], self.r, batch, batch[idx], max_num_neighbors=32)
            x = self.conv((x, None if x is None else x[idx]), (pos, pos[idx]), torch.stack([col, row]))
            return x, pos[idx], batch[idx]

    class PointNet2(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.sa1 = Abstraction(0.5, 0.2, mlp(3, 32, 32, 64))
            self.sa2 = Abstraction(0.25, 0.4, mlp(64 + 3, 64, 64, 128))
            self.fp = mlp(128 + 64, 128)
            self.head = nn.Linear(128, classes)

        def forward(self, pos, batch):
            x1, pos1, batch1 = self.sa1(None, pos, batch)
            x2, pos2, batch2 = self.sa2(x1, pos1, batch1)
            # each first-level point's features from its 3 nearest second-level ones, by inverse squared distance
            near, far = tc.knn(pos2, pos1, 3, batch2, batch1)
            w = 1 / ((pos1[near] - pos2[far]).pow(2).sum(1, keepdim=True) + 1e-8)
            up = torch.zeros(pos1.shape[0], x2.shape[1]).index_add_(0, near, x2[far] * w) / torch.zeros(
                pos1.shape[0], 1).index_add_(0, near, w)  # fmt: skip
            h = self.fp(torch.cat([up, x1], 1))
            return self.head(gnn.global_max_pool(h, batch1))

    g = torch.Generator().manual_seed(1)
    clouds, points = 8, 512
    pos = F.normalize(torch.randn(clouds * points, 3, generator=g), dim=1) * (
        1 + 0.05 * torch.randn(clouds * points, 1, generator=g))  # (points near a sphere's surface)
    batch = torch.arange(clouds).repeat_interleave(points)
    labels = torch.randint(0, 10, (clouds,), generator=g)
    return PointNet2(), {"pos": pos, "batch": batch}, lambda out: F.cross_entropy(out, labels)


def _torch_cluster_dgcnn():
    """A dynamic graph CNN (DGCNN) over a batch of point clouds: each edge convolution links every
    point to its 16 nearest in the current features' space, within its cloud (``torch_cluster::knn``
    over the batch's pointers), and takes the max of an MLP of each pair; the clouds classified by
    a global max pool."""
    tc = _library_operators(lambda: __import__("torch_cluster"), "torch_cluster", "knn")
    import torch_geometric.nn as gnn

    torch.manual_seed(0)

    def mlp(*sizes):
        return nn.Sequential(*[m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())])

    class DGCNN(nn.Module):
        def __init__(self, classes=10, k=16):
            super().__init__()
            self.k = k
            self.conv1, self.conv2 = gnn.EdgeConv(mlp(6, 64, 64), aggr="max"), gnn.EdgeConv(mlp(128, 64), aggr="max")
            self.lin = mlp(128, 256)
            self.head = nn.Linear(256, classes)

        def forward(self, pos, batch):
            x1 = self.conv1(pos, tc.knn_graph(pos, self.k, batch, loop=False, flow="source_to_target"))
            x2 = self.conv2(x1, tc.knn_graph(x1, self.k, batch, loop=False, flow="source_to_target"))
            return self.head(gnn.global_max_pool(self.lin(torch.cat([x1, x2], 1)), batch))

    g = torch.Generator().manual_seed(1)
    clouds, points = 8, 256
    pos = torch.rand(clouds * points, 3, generator=g)
    batch = torch.arange(clouds).repeat_interleave(points)
    labels = torch.randint(0, 10, (clouds,), generator=g)
    return DGCNN(), {"pos": pos, "batch": batch}, lambda out: F.cross_entropy(out, labels)


def _torch_spline_conv():
    """SplineCNN with torch_spline_conv's own operators: two spline convolutions over a graph
    whose edges carry Cartesian pseudo-coordinates in [0, 1]^2 (``torch_spline_conv::spline_basis``:
    each edge's B-spline basis over a 5 x 5 kernel and the kernel weights it reads;
    ``spline_weighting``: the weighted messages), summed into their destinations. Its operators
    exist where torch_spline_conv was built for this torch (``pip install --no-build-isolation
    torch-spline-conv``)."""
    _library_operators(lambda: __import__("torch_spline_conv"), "torch_spline_conv", "spline_basis", "spline_weighting")
    from torch_spline_conv import spline_conv

    torch.manual_seed(0)

    class Spline(nn.Module):
        def __init__(self, features, out, kernel=5):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(kernel * kernel, features, out) / features**0.5)
            self.root = nn.Parameter(torch.randn(features, out) / features**0.5)
            self.bias = nn.Parameter(torch.zeros(out))
            self.register_buffer("kernel_size", torch.tensor([kernel, kernel]))
            self.register_buffer("is_open_spline", torch.tensor([1, 1], dtype=torch.uint8))

        def forward(self, x, edge_index, pseudo):
            return spline_conv(x, edge_index, pseudo, self.weight, self.kernel_size, self.is_open_spline, 1, True,
                               self.root, self.bias)  # fmt: skip

    class SplineCNN(nn.Module):
        def __init__(self, features=16, classes=7):
            super().__init__()
            self.conv1, self.conv2 = Spline(features, 32), Spline(32, 64)
            self.head = nn.Linear(64, classes)

        def forward(self, x, edge_index, pseudo):
            return self.head(F.elu(self.conv2(F.elu(self.conv1(x, edge_index, pseudo)), edge_index, pseudo)))

    g = torch.Generator().manual_seed(1)
    nodes = 2000
    pos = torch.rand(nodes, 2, generator=g)
    src = torch.randint(0, nodes, (nodes * 8,), generator=g)
    dst = torch.arange(nodes).repeat_interleave(8)
    d = pos[dst] - pos[src]
    pseudo = (d / (2 * d.abs().max()) + 0.5).clamp(0, 1)
    labels = torch.randint(0, 7, (nodes,), generator=g)
    return SplineCNN(), {"x": torch.randn(nodes, 16, generator=g), "edge_index": torch.stack([src, dst]),
                         "pseudo": pseudo}, lambda out: F.cross_entropy(out, labels)  # fmt: skip


def _torch_cluster_node2vec():
    """node2vec's skip-gram step with torch_cluster's biased random walks
    (``torch_cluster::random_walk`` over a graph's CSR layout, return parameter 1, in-out 0.5) from
    256 start nodes drawn in the data, negative walks drawn in the step, windows of 5 scored by
    the embeddings' dot products (inference: the walks and the loss, no update)."""
    _library_operators(lambda: __import__("torch_cluster"), "torch_cluster", "random_walk")
    torch.manual_seed(0)
    nodes, walk, context = 1000, 10, 5

    class Walks(nn.Module):
        def __init__(self, dim=64):
            super().__init__()
            self.embedding = nn.Embedding(nodes, dim)

        def score(self, windows):
            return (self.embedding(windows[:, :1]) * self.embedding(windows[:, 1:])).sum(-1)

        def forward(self, rowptr, col, start):
            walks, _ = torch.ops.torch_cluster.random_walk(rowptr, col, start, walk - 1, 1.0, 0.5)
            negative = torch.cat([walks[:, :1], torch.randint(0, nodes, (walks.shape[0], walk - 1))], 1)
            near = walks.unfold(1, context, 1).reshape(-1, context)
            far = negative.unfold(1, context, 1).reshape(-1, context)
            return -F.logsigmoid(self.score(near)).mean() - F.logsigmoid(-self.score(far)).mean()

    g = torch.Generator().manual_seed(1)
    degree = torch.randint(1, 10, (nodes,), generator=g)
    return Walks(), {"rowptr": F.pad(degree.cumsum(0), (1, 0)), "col": torch.randint(0, nodes, (int(degree.sum()),), generator=g),
                     "start": torch.randint(0, nodes, (256,), generator=g)}, lambda out: out  # fmt: skip


def _captum_ig():
    """captum's integrated gradients of a small CNN's class scores (inference only: an attribution
    trains nothing): the images scaled along 16 steps from a black baseline, the steps batched
    through the network, the target class's gradients taken by ``torch.autograd.grad`` with grad
    mode switched on inside the no-grad step, and summed by the Gauss-Legendre weights."""
    from captum.attr import IntegratedGradients

    torch.manual_seed(0)

    class Attribute(nn.Module):
        def __init__(self):
            super().__init__()
            net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                                nn.Flatten(), nn.Linear(512, 10)).eval()  # fmt: skip
            # (held outside the module's parameters: the step explains the network; nothing trains it)
            self.__dict__["ig"] = IntegratedGradients(net)

        def forward(self, images, labels):
            return self.ig.attribute(images, target=labels, n_steps=16, method="gausslegendre")

    return Attribute(), {"images": torch.rand(4, 3, 32, 32), "labels": torch.randint(0, 10, (4,))}, _identity


def _speechbrain_ecapa():
    """speechbrain's ECAPA-TDNN speaker embedding: filter banks of the waveforms (its own STFT and
    mel filters), utterances of different relative lengths (masked statistics), Res2Net blocks with
    squeeze-excitation, attentive statistics pooling, trained by an additive angular margin softmax
    over speakers."""
    torchaudio_module()
    from speechbrain.lobes.features import Fbank
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN, Classifier
    from speechbrain.nnet.losses import AdditiveAngularMargin, LogSoftmaxWrapper

    torch.manual_seed(0)

    class Speakers(nn.Module):
        def __init__(self):
            super().__init__()
            self.fbank = Fbank(n_mels=40)
            self.embed = ECAPA_TDNN(40, lin_neurons=96, channels=[128, 128, 128, 128, 384], attention_channels=32,
                                    se_channels=32)  # fmt: skip
            self.classify = Classifier(input_size=96, lin_neurons=96, out_neurons=50)
            self.loss = LogSoftmaxWrapper(AdditiveAngularMargin(margin=0.2, scale=30))

        def forward(self, wavs, lengths, speakers):
            feats = self.fbank(wavs)
            feats = feats - feats.mean(1, keepdim=True)
            scores = self.classify(self.embed(feats, lengths))
            return self.loss(scores, speakers.unsqueeze(1))

    return Speakers(), {"wavs": torch.randn(4, 16000) * 0.1, "lengths": torch.tensor([1.0, 0.85, 0.7, 0.95]),
                        "speakers": torch.randint(0, 50, (4,))}, _identity  # fmt: skip


def _demucs_htdemucs():
    """demucs's Hybrid Transformer Demucs (no weights), separating a stereo mixture into four
    sources: a spectral branch (complex STFT as channels) and a waveform branch of convolutional
    encoders, a cross-domain transformer between them at the bottom, decoders back, the spectrum's
    inverse STFT added to the waveform; trained by the L1 error against the sources."""
    from demucs.htdemucs import HTDemucs

    torch.manual_seed(0)

    class Separate(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = HTDemucs(["drums", "bass", "other", "vocals"], channels=8, depth=4, nfft=1024, t_layers=2,
                                t_heads=4, bottom_channels=64, samplerate=16000, segment=1)  # fmt: skip

        def forward(self, mix, sources):
            return F.l1_loss(self.net(mix), sources)

    return Separate(), {"mix": torch.randn(2, 2, 16000) * 0.1, "sources": torch.randn(2, 4, 2, 16000) * 0.05}, _identity


def _vocos():
    """Vocos, a vocoder: a mel spectrogram (torchaudio's transform) into a ConvNeXt backbone whose
    head predicts a spectrum's magnitude and phase, turned into audio by an inverse STFT; trained by
    the L1 error of the audio's log mel spectrogram against the target's (the audio made cut to the
    target's length: its inverse STFT's frames run a hop past it)."""
    torchaudio_module()
    from vocos.feature_extractors import MelSpectrogramFeatures
    from vocos.heads import ISTFTHead
    from vocos.models import VocosBackbone

    torch.manual_seed(0)

    class Vocoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.mel = MelSpectrogramFeatures(sample_rate=16000, n_fft=512, hop_length=128, n_mels=64)
            self.backbone = VocosBackbone(input_channels=64, dim=128, intermediate_dim=384, num_layers=4)
            self.head = ISTFTHead(dim=128, n_fft=512, hop_length=128)

        def forward(self, audio):
            target = self.mel(audio)
            out = self.head(self.backbone(target))
            return F.l1_loss(self.mel(out[..., : audio.shape[-1]]), target)

    return Vocoder(), {"audio": torch.randn(2, 16000).clamp(-3, 3) * 0.2}, _identity


def _asteroid_convtasnet():
    """asteroid's Conv-TasNet separating two speakers: a learned filterbank, a temporal
    convolutional mask network (dilated depthwise convolutions, global layer norms), the masked
    basis decoded; trained by permutation-invariant negative SI-SDR (every pairing of estimates and
    sources scored, the best taken per mixture)."""
    torchaudio_module()
    from asteroid.losses import PITLossWrapper, pairwise_neg_sisdr
    from asteroid.models import ConvTasNet

    torch.manual_seed(0)

    class Separate(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = ConvTasNet(n_src=2, n_blocks=4, n_repeats=2, bn_chan=64, hid_chan=128, skip_chan=64,
                                  n_filters=128)  # fmt: skip
            self.loss = PITLossWrapper(pairwise_neg_sisdr, pit_from="pw_mtx")

        def forward(self, mix, sources):
            return self.loss(self.net(mix), sources)

    sources = torch.randn(2, 2, 8000) * 0.1
    return Separate(), {"mix": sources.sum(1), "sources": sources}, _identity


def _diffsort():
    """diffsort's differentiable sorting network: a scorer ranks 16 items per set, a bitonic
    network of relaxed swaps (logistic mixes of each pair) sorts the scores into a doubly
    stochastic permutation matrix, trained by its binary cross-entropy against the true order."""
    from diffsort import DiffSortNet

    torch.manual_seed(0)

    class Rank(nn.Module):
        def __init__(self):
            super().__init__()
            self.score = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
            self.sort = DiffSortNet("bitonic", 16, steepness=10)

        def forward(self, items, truth):
            _, perm = self.sort(self.score(items).squeeze(-1))
            order = torch.argsort(truth, dim=-1)
            target = F.one_hot(order, 16).transpose(-2, -1).float()
            return F.binary_cross_entropy(perm.clamp(0, 1), target)

    items = torch.randn(32, 16, 32)
    return Rank(), {"items": items, "truth": items @ torch.randn(32)}, _identity


def _fast_kmeans():
    """fast-pytorch-kmeans: Lloyd's k-means of 4096 points into 64 clusters (inference only: nothing
    trains), each iteration's assignment a matrix product and an argmax, the centroids a masked
    matrix product, its loop stopped on the host when the centroids move less than a tolerance,
    from the same start each call."""
    from fast_pytorch_kmeans import KMeans

    torch.manual_seed(0)

    class Cluster(nn.Module):
        def __init__(self, start):
            super().__init__()
            self.register_buffer("start", start)

        def forward(self, points):
            return KMeans(n_clusters=64, max_iter=40, tol=1e-4).fit_predict(points, centroids=self.start.clone())

    centres = torch.randn(64, 32) * 3
    points = centres[torch.randint(0, 64, (4096,))] + torch.randn(4096, 32)
    return Cluster(points[torch.randperm(4096)[:64]].clone()), {"points": points}, _identity


def _psgd_kron(params):
    """heavyball's PSGD with a Kronecker-factored preconditioner, eager (its fused steps are
    compiled by default): the preconditioner's triangular factors fitted each step from a random
    probe vector, the momentum preconditioned by them."""
    import heavyball
    import heavyball.utils

    heavyball.utils.compile_mode = None
    return heavyball.PSGDKron(params, lr=1e-3, preconditioner_update_probability=1.0)


def _encodec():
    """EnCodec (no weights), a neural audio codec trained as its paper trains it (without the
    adversarial part): a SEANet encoder (strided convolutions, weight norm, an LSTM), a residual
    vector quantizer at 6 kbps (8 codebooks, nearest codes by distance, codebooks moved by
    exponential moving averages in place, straight-through gradients, a commitment penalty), the
    decoder back; the L1 error of the audio plus the penalty."""
    torchaudio_module()
    from encodec import EncodecModel

    torch.manual_seed(0)

    class Codec(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = EncodecModel._get_model([1.5, 3.0, 6.0], 24000, 1, causal=True)

        def forward(self, audio):
            q = self.net.quantizer(self.net.encoder(audio), self.net.frame_rate, 6.0)
            out = self.net.decoder(q.quantized)[..., : audio.shape[-1]]
            return F.l1_loss(out, audio) + q.penalty

    return Codec(), {"audio": torch.randn(2, 1, 12000).clamp(-3, 3) * 0.1}, _identity


def _torchcrepe():
    """torchcrepe's CREPE pitch tracker with its bundled weights (inference only): a second of
    audio cut into 1,024-sample frames every 10 ms, each normalised, the tiny model's
    convolutions over them in batches, the 360 pitch bins' probabilities decoded by a weighted
    argmax near the most likely bin, and the periodicity read."""
    torchaudio_module()
    import torchcrepe

    class Pitch(nn.Module):
        def forward(self, audio):
            return torchcrepe.predict(audio, 16000, hop_length=160, model="tiny", batch_size=128,
                                      decoder=torchcrepe.decode.weighted_argmax, return_periodicity=True)  # fmt: skip

    t = torch.arange(16000) / 16000
    return Pitch(), {"audio": (0.3 * torch.sin(2 * math.pi * 220 * t) + 0.01 * torch.randn(16000))[None]}, _identity


def _backpack_diag_ggn():
    """BackPACK's extensions of a CNN's backward pass (inference only: nothing trains; a Laplace
    approximation's or EWC's diagonal curvature of a fixed model): module hooks that, inside the
    backward pass, compute each sample's gradient and the exact diagonal of the generalised
    Gauss-Newton matrix (the loss's Hessian factors propagated back through each layer, unfolded
    convolutions, einsums)."""
    from backpack import backpack, extend
    from backpack.extensions import BatchGrad, DiagGGNExact

    torch.manual_seed(0)

    class Curvature(nn.Module):
        def __init__(self):
            super().__init__()
            net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                                nn.ReLU(), nn.Flatten(), nn.Linear(16 * 8 * 8, 10))  # fmt: skip
            # (held outside the module's parameters: the step measures the network; nothing trains it)
            self.__dict__["net"], self.__dict__["loss"] = extend(net), extend(nn.CrossEntropyLoss())

        def forward(self, images, labels):
            with torch.enable_grad(), backpack(BatchGrad(), DiagGGNExact()):
                self.loss(self.net(images), labels).backward()
            return [(p.grad_batch, p.diag_ggn_exact) for p in self.net.parameters()]

    return Curvature(), {"images": torch.randn(16, 3, 16, 16), "labels": torch.randint(0, 10, (16,))}, _identity


def _freia_glow():
    """FrEIA's invertible network: eight all-in-one coupling blocks (affine couplings whose scales
    and shifts an MLP computes from the other half, soft permutations, global affine scaling, the
    log-determinant of each), trained by maximum likelihood under a standard normal."""
    import FrEIA.framework as Ff
    import FrEIA.modules as Fm

    torch.manual_seed(0)

    def subnet(dims_in, dims_out):
        return nn.Sequential(nn.Linear(dims_in, 128), nn.ReLU(), nn.Linear(128, dims_out))

    class Flow(nn.Module):
        def __init__(self):
            super().__init__()
            self.inn = Ff.SequenceINN(16)
            for _ in range(8):
                self.inn.append(Fm.AllInOneBlock, subnet_constructor=subnet, permute_soft=True)

        def forward(self, x):
            z, log_det = self.inn(x)
            return (0.5 * z.square().sum(1) - log_det).mean()

    return Flow(), {"x": torch.randn(256, 16) @ torch.randn(16, 16) * 0.5}, _identity


def _bayesian_torch():
    """bayesian-torch's variational layers (a CNN turned Bayesian by ``dnn_to_bnn``): every
    forward pass draws each weight by reparametrisation from its posterior (random numbers drawn
    inside the step), trained by cross-entropy plus the posteriors' KL divergence from the prior;
    inference draws weights too (one Monte Carlo sample of the prediction)."""
    from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss

    torch.manual_seed(0)

    class Bayesian(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                                     nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, 10))  # fmt: skip
            dnn_to_bnn(self.net, {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0,
                                  "posterior_rho_init": -3.0, "type": "Reparameterization", "moped_enable": False})  # fmt: skip

        def forward(self, images, labels):
            return F.cross_entropy(self.net(images), labels) + get_kl_loss(self.net) / len(images)

    return Bayesian(), {"images": torch.randn(16, 3, 32, 32), "labels": torch.randint(0, 10, (16,))}, _identity


def _torchhd_onlinehd():
    """torchhd's OnlineHD (hyperdimensional computing; inference only: no gradients): samples
    encoded into 4,096-dimensional hypervectors by a random sinusoid projection, one single-pass
    update of the class prototypes from the same start each call (the mispredicted samples,
    a count the data decide, added where the cosine similarities say), then the batch classified
    by them."""
    import torchhd.classifiers

    torch.manual_seed(0)

    class Hyper(nn.Module):
        def __init__(self):
            super().__init__()
            hd = torchhd.classifiers.OnlineHD(32, 4096, 10, epochs=1)
            # (held outside the module's parameters: its prototypes are set, not trained by gradients)
            self.__dict__["hd"] = hd
            self.register_buffer("start", torch.randn(10, 4096) * 0.01)

        def forward(self, samples, labels):
            self.hd.model.weight.data.copy_(self.start)
            self.hd.model.add_online(self.hd.encoder(samples), labels, lr=self.hd.lr)
            return self.hd.model(self.hd.encoder(samples)).argmax(1)

    centres = torch.randn(10, 32)
    labels = torch.randint(0, 10, (512,))
    return Hyper(), {"samples": centres[labels] + 0.8 * torch.randn(512, 32), "labels": labels}, _identity


LIBRARIES: dict[str, Callable[[], tuple]] = {
    "pyro_vae": _pyro_vae,
    "gpytorch_cholesky": lambda: _gpytorch("cholesky"),
    "gpytorch_cg": lambda: _gpytorch("cg"),
    "e3nn_message_passing": _e3nn,
    "torchdiffeq_ode": _torchdiffeq,
    "x_transformers_decoder": _x_transformers,
    "peft_lora_llama": _peft_lora,
    "torch_harmonics_sfno": _torch_harmonics,
    "vector_quantize_ema": _vector_quantize,
    "torchmetrics_scores": _torchmetrics,
    # session 76's second batch
    "kornia_geometry": _kornia,
    "monai_unet3d": _monai,
    "metric_learning_triplets": _metric_learning,
    "normflows_spline": _normflows,
    "torchsde_latent": _torchsde,
    "botorch_qlogei": _botorch,
    "schedulefree_adamw": _with_optimizer(_schedule_free),
    "lion": _with_optimizer(_lion),
    "shampoo": _with_optimizer(_shampoo),
    "lamb": _with_optimizer(_lamb),
    "perceiver": _perceiver,
    # session 76's third batch
    "performer_lm": _performer,
    "reformer_lm": _reformer,
    "st_moe": _st_moe,
    "ncps_cfc": _ncps,
    "torchcde_neural_cde": _torchcde,
    "entmax_attention": _entmax,
    "geomloss_sinkhorn": _geomloss,
    "ft_transformer": _ft_transformer,
    # session 77's batch
    "opacus_dp_sgd": _opacus,
    "snntorch_spiking": _snntorch,
    "spikingjelly_lif": _spikingjelly,
    "mambapy_pscan": _mambapy,
    "pykan_kan": _pykan,
    "torch_ema": lambda: (*_classifier(), _AveragedOptimizer),
    "zuko_nsf": _zuko,
    "zuko_unaf": _zuko_unaf,
    "higher_maml": _higher_maml,
    "torchopt_maml": _torchopt_maml,
    "torchani_forces": _torchani,
    "adamw_8bit": _with_optimizer(_adamw_8bit),
    "wavelet_denoiser": _wavelets,
    "nflows_maf": _nflows,
    "bilstm_crf": _crf,
    "torchquad_simpson": _torchquad,
    "tabnet": _tabnet,
    "auraloss_stft": _auraloss,
    "ms_ssim_autoencoder": _msssim,
    "roma_procrustes": _roma,
    "periodic_embeddings": _periodic_embeddings,
    "julius_resample": _julius,
    "muon": _with_optimizer(_muon),
    "soap": _with_optimizer(_soap),
    "prodigy": _with_optimizer(_prodigy),
    "adan": _with_optimizer(_adan),
    "ademamix": _with_optimizer(_ademamix),
    "torchrec_dlrm": _torchrec_dlrm,
    "geoopt_poincare": _geoopt_poincare,
    "torchode_tsit5": _torchode,
    "nnaudio_cqt": _nnaudio,
    "torch_struct_crf": _torch_struct,
    "tensorly_parafac": _tensorly,
    "torchmin_bfgs": _torchmin,
    "pytorch_tcn": _pytorch_tcn,
    "neuralop_fno": _neuralop_fno,
    "pykeen_rotate": _pykeen_rotate,
    "sb3_ppo": _sb3_ppo,
    "s5_ssm": _s5,
    "local_attention_lm": _local_attention,
    "siren_image": _siren,
    "torchcfm_ot": _torchcfm,
    "brevitas_qat": _brevitas,
    "deepxde_pinn": _deepxde_pinn,
    "memory_efficient_attention": _memory_efficient_attention,
    "nystrom_attention": _nystrom,
    "soft_moe": _soft_moe,
    "mlp_mixer": _mlp_mixer,
    "recbole_sasrec": _recbole_sasrec,
    # session 79's batch
    "torchfm_deepfm": lambda: _torchfm("deepfm"),
    "torchfm_xdeepfm": lambda: _torchfm("xdeepfm"),
    "pomegranate_hmm": _pomegranate_hmm,
    "ctgan": _ctgan,
    "xlstm": _xlstm,
    "kymatio_scattering": _kymatio,
    "esm2": _esm2,
    "mixture_of_experts": _mixture_of_experts,
    "linear_attention": _linear_attention,
    "g_mlp": _g_mlp,
    "deepctr_din": _deepctr_din,
    "product_key_memory": _product_key_memory,
    "conformer": _conformer,
    "point_transformer": _point_transformer,
    "egnn": _egnn,
    "routing_transformer": _routing_transformer,
    "came": _with_optimizer(_came),
    # session 81's batch
    "hummingbird_gemm": lambda: _hummingbird("gemm"),
    "hummingbird_tree_walk": lambda: _hummingbird("perf_tree_trav"),
    "mace": _mace,
    "gluonts_deepar": _gluonts_deepar,
    "titans_memory": _titans,
    "mega": _mega,
    "block_recurrent": _block_recurrent,
    "torchlibrosa_tagger": _torchlibrosa,
    # session 82's batch (torchvision: see torchvision_module)
    "ultralytics_yolo": _ultralytics_yolo,
    "smp_unet": _smp_unet,
    "tv_faster_rcnn": lambda: _torchvision_detector("faster_rcnn"),
    "tv_mask_rcnn": lambda: _torchvision_detector("mask_rcnn"),
    "tv_retinanet": lambda: _torchvision_detector("retinanet"),
    "tv_fcos": lambda: _torchvision_detector("fcos"),
    "tv_ssdlite": lambda: _torchvision_detector("ssdlite"),
    "tv_deformable_rois": _torchvision_deformable,
    "torchaudio_rnnt": _torchaudio_rnnt,
    "torchaudio_biquads": _torchaudio_biquads,
    "torchaudio_forced_align": _torchaudio_forced_align,
    "torch_scatter_graphs": _torch_scatter_graphs,
    "torch_sparse_gcn": _torch_sparse_gcn,
    "torch_cluster_pointnet2": _torch_cluster_pointnet2,
    "torch_cluster_dgcnn": _torch_cluster_dgcnn,
    "torch_spline_conv": _torch_spline_conv,
    "torch_cluster_node2vec": _torch_cluster_node2vec,
    "lightly_dino": _lightly_dino,
    "ddpm": _ddpm,
    "efficientnet": _efficientnet,
    "torchrl_sac": _torchrl_sac,
    "bs_roformer": _bs_roformer,
    "tltorch_factorized": _tltorch,
    "colt5_routed": _colt5,
    # session 83's batch
    "navit": _navit,
    "max_vit": _max_vit,
    "schnetpack_painn": _schnetpack_painn,
    "kbnufft_recon": _kbnufft_recon,
    "sam_small": _sam_small,
    # session 83's second batch (timm and open_clip: see torchvision_module)
    "timm_eva02": lambda: _timm("eva02_tiny_patch14_224", img_size=64, patch_size=8, depth=4),
    "timm_nf_regnet": lambda: _timm("nf_regnet_b0"),
    "timm_efficientformer_v2": lambda: _timm("efficientformerv2_s0", img_size=64),
    "open_clip_coca": _open_clip_coca,
    "widedeep_tab_transformer": _widedeep_tab_transformer,
    "enformer": _enformer,
    # session 84's batch
    "pypose_lm": _pypose_lm,
    "compressai_hyperprior": _compressai_hyperprior,
    "forecasting_tft": _pytorch_forecasting_tft,
    "equiformer": _equiformer,
    "galore_adamw": _with_optimizer(_galore),
    "chemprop_mpnn": _chemprop_mpnn,
    "litgpt_llama": _litgpt,
    "deepwave_fwi": _deepwave_fwi,
    "torchscale_retnet": _torchscale_retnet,
    "mup_adamw": _mup,
    "torchdyn_node": _torchdyn_node,
    "megabyte": _megabyte,
    "rechub_mmoe": _rechub_mmoe,
    "norse_snn": _norse_snn,
    # session 85's batch (torchaudio: see torchaudio_module)
    "captum_ig": _captum_ig,
    "speechbrain_ecapa": _speechbrain_ecapa,
    "demucs_htdemucs": _demucs_htdemucs,
    "vocos": _vocos,
    "asteroid_convtasnet": _asteroid_convtasnet,
    "diffsort": _diffsort,
    "fast_kmeans": _fast_kmeans,
    "psgd_kron": _with_optimizer(_psgd_kron),
    "encodec": _encodec,
    "torchcrepe_pitch": _torchcrepe,
    "backpack_diag_ggn": _backpack_diag_ggn,
    "freia_glow": _freia_glow,
    "bayesian_torch_cnn": _bayesian_torch,
    "torchhd_onlinehd": _torchhd_onlinehd,
}
