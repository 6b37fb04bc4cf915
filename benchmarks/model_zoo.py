"""Coverage and fidelity over transformers architectures that no other part of the project uses.

Each model is built small from its config (no weights downloaded), a training step (AdamW) and an
inference step are captured with the capture helper, and the trace is replayed on the CPU at one
thread: ops replayed / selected, skipped, substituted, notes (not counting the optimizer state's and
the composites'), whether three iterations run, and a quick ratio of the replay's median to the
original's over six alternated blocks of two (a rough figure: these steps are 1-300 ms and the host
drifts; benchmarks/fidelity_interleaved.py measures fidelity properly). Causal and masked language
models (GPT-Neo, OPT, BLOOM's ALiBi, Falcon, Phi, Qwen2 and its mixture of experts, Gemma, Gemma 2,
Mistral, GPT-J, CodeGen, StarCoder's multi-query attention, Mamba, RWKV, RoBERTa, ALBERT, ELECTRA,
MobileBERT, Funnel, FNet's Fourier mixing, BigBird, XLNet, RoFormer, MPNet, Longformer; GPT-NeoX,
OLMo, StableLM, Persimmon, Cohere, Granite, XGLM, MPT, Jamba's Mamba and attention layers with
experts, Reformer's reversible layers, ERNIE, SqueezeBERT's grouped convolutions, ConvBERT, RemBERT,
Nystromformer, CANINE's characters, ESM's proteins; Qwen3 and its experts, OLMoE, GraniteMoE,
DeepSeek-V3's low-rank attention and routed experts, Mamba-2's chunked scan, BioGPT, ModernBERT's
alternating local and global attention; Phi-3's fused projections, Mixtral, StarCoder2, Gemma 3,
Nemotron, DBRX's clipped QKV and fused experts, Cohere 2, Falcon-Mamba, Bamba and RecurrentGemma's
hybrids, LFM2's short convolutions, gpt-oss's attention sinks and experts, JetMoE, DeBERTa-v2's
disentangled attention, Megatron-BERT, XLM; Apertus, Doge, Falcon-H1, MiniMax's lightning attention,
GraniteMoE-hybrid, PhiMoE, Zamba2, OLMo 2, GLM-4, EXAONE 4, Helium, ERNIE 4.5; Llama 4's routed
experts, Nemotron-H's Mamba-2 hybrid, BitNet's ternary weights, DiffLlama's differential attention,
OLMo 3, Seed-OSS, Hunyuan's and MiniMax-M2's, GLM-4.5's, ERNIE 4.5's, Cohere 2's, EXAONE's, AFMoE's,
FlexOlmo's, GraniteMoE-shared's, LFM2's and dots.llm1's experts, VaultGemma, Arcee, SmolLM3, OLMo's
hybrid of gated DeltaNet and attention, Qwen3-Next's and Qwen3.5's linear attention, Kimi Linear's
delta attention, DeepSeek-V2's and MiniCPM3's latent attention, DeepSeek-V3.2's sparse attention
indexer, Gemma 3n's AltUp and Laurel blocks; EuroBERT, Nomic BERT, GTE, YOSO's hashed attention,
MRA's multi-resolution attention, I-BERT's integer-only arithmetic, DeBERTa, LUKE; from transformers
5.24 and 5.25, nanochat, Dory, Flint, Beam, CWM, LFM3, HRM's recurrent reasoning modules, Granite's
sliding windows, IQuest-Coder, Jais 2, InternLM3, Apertus 1.5, Gemma 4, Kolibri 1.1's indexed
attention, Ergo, MiniCPM5's, Param2's, Sarvam's, MiMo-V2-Flash's, Laguna's, Solar Open's,
GraniteMoE-SWA's, Mellum's, Hunyuan 3's and 4's, Kolibri's, Inkling's and ZAYA's experts, Lara-mini's
gated delta attention, DeepSeek-V4, Sarvam's, GLM-MoE-DSA's, GLM-4-MoE-Lite's and A.X K2's latent
attention, ESM C, UltraBERT, NeoMME, Jina embeddings v3, FlauBERT, RoCBert, XLM-RoBERTa-XL), encoder-decoders
(Pegasus, Marian, mBART, LED, M2M-100, Switch Transformers' top-1 routing, mT5, LongT5, Blenderbot,
ProphetNet's n-gram streams, BigBird-Pegasus, PLBart, NLLB-MoE's experts with a capacity; BART, T5,
UMT5; PEGASUS-X's block-local and global tokens, T5Gemma, Blenderbot-small), vision models (ResNet, RegNet, MobileNetV2, BEiT, DINOv2, SegFormer, MobileViT, PoolFormer,
ConvNeXt V2, Swin V2, MobileNetV1, FocalNet, ViT-MSN, Data2Vec vision, EfficientNet's squeeze-and-
excitation, BiT's weight-standardised convolutions and group norm, PVT v2, Hiera's unrolled stages;
ConvNeXt, Swin, DeiT, LeViT, CvT's convolutional projections; YOLOS and DETR's detection losses with
their matching, GLPN's depth; DINOv2 with registers, I-JEPA, MobileViTV2's separable attention,
SwiftFormer, PVT, TextNet, SigLIP's and CLIP's vision towers; HGNet-V2), speech models (wav2vec 2.0, HuBERT, WavLM, SEW, UniSpeech, Data2Vec
audio, wav2vec 2.0 Conformer with CTC losses, Speech2Text, Whisper, Moonshine; LayerDrop off, since
a step that skips a random layer is not the traced one) and time-series forecasters (PatchTST,
PatchTSMixer, and Informer's and Autoformer's probabilistic forecasts). ``--family diffusers``
runs diffusers' models instead (benchmarks/diffusion_models.py: UNets in 1, 2 and 3 dimensions,
ControlNet, image, video and audio autoencoders, DiT-style and MMDiT transformers), trained as
denoisers: the squared error of the prediction against noise drawn each step; ``--family graphs``
PyTorch Geometric's graph networks (benchmarks/graph_models.py: GCN, GraphSAGE, GAT, GATv2, GIN,
PNA, a graph transformer) over a graph whose destinations crowd on hub nodes; ``--family
multimodal`` transformers' vision-language models (benchmarks/multimodal_models.py: LLaVA and
LLaVA-NeXT, PaliGemma, Gemma 3, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Idefics 2 and 3, InternVL,
Mistral 3, Mllama, BLIP, BLIP-2, GIT, Kosmos-2, Chameleon, Fuyu, Pix2Struct, and CLIP's and
SigLIP's contrastive training), their image features put into the text at its image tokens;
``--family libraries`` models written with other PyTorch libraries (benchmarks/library_models.py:
Pyro's variational autoencoder, GPyTorch's Gaussian processes by Cholesky and by conjugate
gradients, an e3nn equivariant layer, a torchdiffeq neural ODE, an x-transformers decoder, PEFT's
LoRA adapters, a torch-harmonics spherical Fourier layer, vector-quantize-pytorch's EMA codebook,
torchmetrics' scores, kornia, MONAI, pytorch-metric-learning, normflows, torchsde, botorch, the
optimizers of schedule-free, Lion, torch-optimizer's Shampoo and LAMB, a Perceiver, Performer's and
Reformer's attention, ST-MoE's experts, a CfC network, a neural CDE, entmax attention, a Sinkhorn
divergence, an FT-Transformer, Opacus' DP-SGD, spiking networks of snntorch and spikingjelly,
mambapy's parallel scan, a Kolmogorov-Arnold network, torch-ema, zuko's flows, MAML by higher and
by TorchOpt, a TorchANI potential trained on forces, bitsandbytes' 8-bit AdamW, a wavelet
denoiser, an nflows MAF, a BiLSTM-CRF, a torchquad integral, TabNet, an STFT-loss upsampler, an
MS-SSIM autoencoder, roma's Procrustes, periodic embeddings, julius' resampling, the optimizers
Muon, SOAP, Prodigy, Adan and AdEMAMix; TorchRec's DLRM, geoopt's Poincare embeddings, a
torchode batch, an nnAudio CQT tagger, a torch-struct CRF, tensorly's CP decomposition, a BFGS fit
by pytorch-minimize, a pytorch-tcn forecaster; a Fourier neural operator, pykeen's RotatE, an SB3 PPO
loss, S5, local attention, a SIREN, torchcfm's OT flow matching, brevitas' quantization-aware
training, a deepxde PINN, chunked attention, a Nystromformer, a soft MoE, an MLP-Mixer; RecBole's
SASRec; hummingbird's compiled forests, MACE, GluonTS's DeepAR, titans' neural memory, Mega, a
block-recurrent transformer, a torchlibrosa audio tagger; Ultralytics' YOLO11n,
segmentation-models-pytorch's U-Net, lightly's DINO, denoising-diffusion-pytorch's Gaussian
diffusion, efficientnet_pytorch's EfficientNet-B0, TorchRL's SAC, BS-RoFormer, tensorly-torch's
factorized layers, CoLT5's routed block; vit-pytorch's NaViT and MaxViT, schnetpack's PaiNN
trained on forces, a torchkbnufft MRI reconstruction, a small Segment Anything; timm's EVA-02,
NF-RegNet and EfficientFormerV2, open_clip's CoCa, pytorch-widedeep's TabTransformer, a small
Enformer; pypose's Levenberg-Marquardt, compressai's hyperprior, a Temporal Fusion Transformer,
Equiformer, GaLore, chemprop, LitGPT, deepwave, RetNet, mup, torchdyn, MEGABYTE, MMoE, norse;
captum's integrated gradients, speechbrain's ECAPA-TDNN, Hybrid Transformer Demucs, Vocos,
asteroid's Conv-TasNet, diffsort, k-means, heavyball's PSGD, EnCodec, torchcrepe, BackPACK's
curvature, FrEIA's coupling flow, bayesian-torch's variational CNN, torchhd's OnlineHD), each built
where its library is installed.
A trace whose two recorded calls ran different operators (the capture helper's check, recorded in
its sidecar) is marked VARIES and left out of the ratios: the original's timing covers calls other
than the traced one. The last lines count the traces that replay every op and run. With
``--ops N``, alternated profiled calls of each side also compare the time inside operators (the
part of a step that a trace holds) and give the original's share outside them (its Python, the
autograd engine's own work): N calls at least, more for a short step, up to 8N, so that each side
profiles a quarter of a second of steps (at five calls, a 1.3 ms inference step's ratio moved from
0.87 to 1.01 between runs; at forty, rounds in four processes gave 0.905-1.016, about 0.95).
``--op-timer dispatch`` times the operators with a clock around each call at the dispatcher
instead of the profiler, ``both`` with each, each in a column (``host`` is the profiler's): the
two instruments disturb the steps differently, and where their ratios differ the difference is
theirs (a step's ratio moved by up to 14 points with the instrument: benchmarks/RESULTS.md).

    python benchmarks/model_zoo.py [--ops N] [--op-timer T] [--steps both|train|infer] [--family F]
        [--precision P] [--infer-with-grad] [--without-records] [MODEL ...]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fidelity_interleaved import op_timer_option, timer_label  # noqa: E402

from pytest_mystique.measure import inside_operators_alternated, profiled_calls, steady_allocator  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.runner import build_canary  # noqa: E402
from pytest_mystique.sidecar import INPUT_RECORDS, load_sidecar, sidecar_path  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402

# (PyPI's torchvision, a CUDA build, does not import beside the CPU torch; transformers, diffusers and
# some libraries import it where it is installed: it is made importable first, library_models.torchvision_module)
if importlib.util.find_spec("torchvision") is not None:
    from library_models import torchvision_module  # noqa: E402

    torchvision_module()

# the other families, each where its library is installed (benchmarks/ is on the path of whatever
# runs or imports this module)
try:
    from diffusion_models import DIFFUSION  # noqa: E402

    NO_DIFFUSERS = None
except ImportError as e:  # diffusers is not installed (or not a version with these models)
    DIFFUSION, NO_DIFFUSERS = {}, f"{type(e).__name__}: {e}"
try:
    from graph_models import GRAPHS  # noqa: E402

    NO_PYG = None
except ImportError as e:
    GRAPHS, NO_PYG = {}, f"{type(e).__name__}: {e}"
from library_models import LIBRARIES  # noqa: E402  (each model imports its own library when built)

try:
    from multimodal_models import MULTIMODAL, TRAINING_ONLY  # noqa: E402

    NO_MULTIMODAL = None
except (ImportError, AttributeError) as e:  # (a transformers without these models)
    MULTIMODAL, TRAINING_ONLY, NO_MULTIMODAL = {}, (), f"{type(e).__name__}: {e}"

TXT = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
           max_position_embeddings=128)
S2S = dict(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128,
           pad_token_id=0, decoder_start_token_id=1, bos_token_id=1, eos_token_id=2)
#: grouped-query attention (2 key/value heads of 16), mixtures of experts (4, 2 a token; the names
#: architectures give these), multi-head latent attention (DeepSeek's low-rank keys and values)
GQA = dict(TXT, num_key_value_heads=2, head_dim=16)
MOE = dict(num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
           n_group=1, topk_group=1)
MLA = dict(q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)
#: a vision transformer's tower inside a vision-language model's config (SigLIP, CLIP)
VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=64, patch_size=8)
tf = None  # transformers, imported by main()

#: model type -> (Auto class, config, inputs)
MODELS = {  # fmt: skip
 # causal LMs
 "gpt_neo": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], max_position_embeddings=128, window_size=16), "lm"),
 "opt": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64, max_position_embeddings=128), "lm"),
 "bloom": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4), "lm"),
 "falcon": ("AutoModelForCausalLM", dict(TXT, num_kv_heads=2, new_decoder_architecture=True, alibi=False), "lm"),
 "phi": ("AutoModelForCausalLM", dict(TXT), "lm"),
 "qwen2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "gemma": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16), "lm"),
 "gemma2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, sliding_window=16), "lm"),
 "mistral": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, sliding_window=16), "lm"),
 "gptj": ("AutoModelForCausalLM", dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128), "lm"),
 "codegen": ("AutoModelForCausalLM", dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128, n_ctx=128), "lm"),
 "gpt_bigcode": ("AutoModelForCausalLM", dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128, multi_query=True), "lm"),
 "qwen2_moe": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, moe_intermediate_size=64, shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2), "lm"),
 "mamba": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, state_size=8), "lm"),
 "rwkv": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, attention_hidden_size=64, intermediate_size=128, context_length=128), "lm"),
 "gpt_neox": ("AutoModelForCausalLM", dict(TXT), "lm"),
 "olmo": ("AutoModelForCausalLM", dict(TXT), "lm"),
 "stablelm": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "persimmon": ("AutoModelForCausalLM", dict(TXT), "lm"),
 "cohere": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "granite": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "xglm": ("AutoModelForCausalLM", dict(vocab_size=1000, d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, max_position_embeddings=128), "lm"),
 "mpt": ("AutoModelForCausalLM", dict(vocab_size=1000, d_model=64, n_layers=2, n_heads=4, max_seq_len=128), "lm"),
 "jamba": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_dt_rank=8, use_mamba_kernels=False), "lm"),
 "qwen3": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16), "lm"),
 "qwen3_moe": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1), "lm"),
 "olmoe": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2), "lm"),
 "granitemoe": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2), "lm"),
 "deepseek_v3": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16), "lm"),
 "mamba2": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, state_size=8, num_heads=8, head_dim=16, n_groups=1, expand=2, chunk_size=16), "lm"),
 "biogpt": ("AutoModelForCausalLM", dict(TXT), "lm"),
 "phi3": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, pad_token_id=0), "lm"),
 "mixtral": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2), "lm"),
 "starcoder2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, sliding_window=16), "lm"),
 "gemma3_text": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, sliding_window=16), "lm"),
 "nemotron": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "dbrx": ("AutoModelForCausalLM", dict(vocab_size=1000, d_model=64, n_layers=2, n_heads=4, max_seq_len=128, attn_config=dict(kv_n_heads=2, clip_qkv=8.0, rope_theta=10000.0), ffn_config=dict(ffn_hidden_size=64, moe_num_experts=4, moe_top_k=2)), "lm"),
 "cohere2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, sliding_window=16), "lm"),
 "falcon_mamba": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, state_size=8), "lm"),
 "bamba": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, attn_layer_indices=[1], mamba_d_state=8, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1, mamba_chunk_size=16), "lm"),
 "recurrent_gemma": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128, lru_width=64, attention_window_size=16, block_types=["recurrent", "attention"]), "lm"),
 "lfm2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, layer_types=["conv", "full_attention"], block_ff_dim=128, block_auto_adjust_ff_dim=False), "lm"),
 "gpt_oss": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=16, layer_types=["sliding_attention", "full_attention"]), "lm"),
 "jetmoe": ("AutoModelForCausalLM", dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_key_value_heads=2, kv_channels=16, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128), "lm"),
 "apertus": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "doge": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "falcon_h1": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=1, mamba_d_state=8, mamba_chunk_size=16), "lm"),
 "minimax": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, layer_types=["linear_attention", "full_attention"], block_size=16), "lm"),
 "granitemoehybrid": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, layer_types=["mamba", "attention"], mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8, mamba_chunk_size=16), "lm"),
 "phimoe": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2), "lm"),
 "zamba2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=4, mamba_d_state=8, mamba_headdim=16, n_mamba_heads=8, mamba_ngroups=1, chunk_size=16, layers_block_type=["mamba", "hybrid"], hybrid_layer_ids=[1], num_mem_blocks=1, use_mem_rope=False, attention_head_dim=32), "lm"),
 "olmo2": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2), "lm"),
 "glm4": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, pad_token_id=0), "lm"),
 "exaone4": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16, sliding_window=16), "lm"),
 "helium": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16), "lm"),
 "ernie4_5": ("AutoModelForCausalLM", dict(TXT, num_key_value_heads=2, head_dim=16), "lm"),
 "llama4_text": ("AutoModelForCausalLM", dict(GQA, num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=128), "lm"),
 "nemotron_h": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "bitnet": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "diffllama": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "olmo3": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "seed_oss": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "hunyuan_v1_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "minimax_m2": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "glm4_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "ernie4_5_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "vaultgemma": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "cohere2_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "exaone_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "afmoe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "arcee": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "granitemoeshared": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "smollm3": ("AutoModelForCausalLM", dict(GQA, pad_token_id=0), "lm"),
 "flex_olmo": ("AutoModelForCausalLM", dict(GQA, **MOE, pad_token_id=0), "lm"),
 "olmo_hybrid": ("AutoModelForCausalLM", dict(GQA, pad_token_id=0), "lm"),
 "qwen3_next": ("AutoModelForCausalLM", dict(GQA, **MOE, use_cache=False), "lm"),
 "qwen3_5_text": ("AutoModelForCausalLM", dict(GQA, use_cache=False), "lm"),
 "kimi_linear": ("AutoModelForCausalLM", dict(GQA, **MOE, pad_token_id=0, use_cache=False), "lm"),
 "deepseek_v2": ("AutoModelForCausalLM", dict(TXT, **MOE, **MLA, num_key_value_heads=4, first_k_dense_replace=1), "lm"),
 "deepseek_v32": ("AutoModelForCausalLM", dict(TXT, **MOE, **MLA, num_key_value_heads=4, first_k_dense_replace=1), "lm"),
 "minicpm3": ("AutoModelForCausalLM", dict(TXT, **MLA, num_key_value_heads=4), "lm"),
 "lfm2_moe": ("AutoModelForCausalLM", dict(GQA, **MOE, layer_types=["conv", "full_attention"], num_dense_layers=1), "lm"),
 "dots1": ("AutoModelForCausalLM", dict(GQA, **MOE, first_k_dense_replace=1, n_shared_experts=1), "lm"),
 # transformers 5.24-5.25 architectures (session 58)
 "nanochat": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "dory": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "flint": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "beam": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "cwm": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "lfm3": ("AutoModelForCausalLM", dict(GQA, pad_token_id=0), "lm"),
 "hrm_text": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "granite_swa": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "iquestcoder": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "jais2": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "internlm3": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "apertus1p5_text": ("AutoModelForCausalLM", dict(GQA), "lm"),
 "gemma4_text": ("AutoModelForCausalLM", dict(GQA, vocab_size_per_layer_input=1000, hidden_size_per_layer_input=16), "lm"),
 "kolibri1_1": ("AutoModelForCausalLM", dict(GQA, **MOE, index_num_heads=2), "lm"),
 "ergo": ("AutoModelForCausalLM", dict(GQA, **MOE, first_dense_intermediate_size=128), "lm"),
 "minicpm5_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "param2moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "sarvam_moe": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "mimo_v2_flash": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "laguna": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "solar_open": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "granitemoe_swa": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "mellum": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "lara_mini": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "hy_v3": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "kolibri1": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "inkling_text": ("AutoModelForCausalLM", dict(GQA, **MOE), "lm"),
 "hy_v4": ("AutoModelForCausalLM", dict(GQA, **MOE, pad_token_id=0), "lm"),
 "zaya": ("AutoModelForCausalLM", dict(GQA, **dict(MOE, num_experts_per_tok=1)), "lm"),
 "deepseek_v4": ("AutoModelForCausalLM", dict(GQA, **MOE, **MLA), "lm"),
 "sarvam_mla": ("AutoModelForCausalLM", dict(GQA, **MOE, **MLA), "lm"),
 "glm_moe_dsa": ("AutoModelForCausalLM", dict(GQA, **MOE, **MLA, num_key_value_heads=4), "lm"),
 "glm4_moe_lite": ("AutoModelForCausalLM", dict(GQA, **MOE, **MLA, num_key_value_heads=4), "lm"),
 "axk2": ("AutoModelForCausalLM", dict(GQA, **MOE, **MLA, num_key_value_heads=4), "lm"),
 "gemma3n_text": ("AutoModelForCausalLM", dict(GQA, num_kv_shared_layers=0, laurel_rank=8, altup_num_inputs=2, hidden_size_per_layer_input=16, vocab_size_per_layer_input=1000, activation_sparsity_pattern=[0.0, 0.0], layer_types=["sliding_attention", "full_attention"], sliding_window=16), "lm"),
 # encoders
 "roberta": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=1), "lm"),
 "albert": ("AutoModelForMaskedLM", dict(TXT, embedding_size=32), "lm"),
 "electra": ("AutoModelForMaskedLM", dict(TXT, embedding_size=32), "lm"),
 "mobilebert": ("AutoModelForMaskedLM", dict(TXT, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=2), "lm"),
 "funnel": ("AutoModelForMaskedLM", dict(vocab_size=1000, d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1], num_decoder_layers=1), "lm"),
 "fnet": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "big_bird": ("AutoModelForMaskedLM", dict(TXT, attention_type="original_full"), "lm"),
 "xlnet": ("AutoModelForCausalLM", dict(vocab_size=1000, d_model=64, n_layer=2, n_head=4, d_inner=128), "lm"),
 "roformer": ("AutoModelForMaskedLM", dict(TXT, embedding_size=64), "lm"),
 "mpnet": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "longformer": ("AutoModelForMaskedLM", dict(TXT, attention_window=16), "lm"),
 "reformer": ("AutoModelForMaskedLM", dict(vocab_size=1000, hidden_size=64, num_attention_heads=2, attention_head_size=32, feed_forward_size=128, attn_layers=["local", "local"], axial_pos_shape=[8, 8], axial_pos_embds_dim=[32, 32], is_decoder=False, max_position_embeddings=64, local_attn_chunk_length=16), "lm"),
 "ernie": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "squeezebert": ("AutoModelForMaskedLM", dict(TXT, embedding_size=64, q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2, intermediate_groups=4, output_groups=4), "lm"),
 "convbert": ("AutoModelForMaskedLM", dict(TXT, embedding_size=64), "lm"),
 "rembert": ("AutoModelForMaskedLM", dict(TXT, input_embedding_size=32, output_embedding_size=32), "lm"),
 "nystromformer": ("AutoModelForMaskedLM", dict(TXT, num_landmarks=8, segment_means_seq_len=64), "lm"),
 "canine": ("AutoModelForSequenceClassification", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_hash_buckets=64, num_hash_functions=2, downsampling_rate=4, local_transformer_stride=16, max_position_embeddings=256), "cls"),
 "esm": ("AutoModelForMaskedLM", dict(TXT, vocab_size=33, pad_token_id=1, position_embedding_type="rotary"), "protein"),
 "modernbert": ("AutoModelForMaskedLM", dict(TXT, global_attn_every_n_layers=2, local_attention=16, pad_token_id=0), "lm"),
 "deberta-v2": ("AutoModelForMaskedLM", dict(TXT, relative_attention=True, position_buckets=32, pos_att_type=["p2c", "c2p"]), "lm"),
 "megatron-bert": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "xlm": ("AutoModelForSequenceClassification", dict(vocab_size=1000, emb_dim=64, n_layers=2, n_heads=4, max_position_embeddings=128), "cls"),
 "eurobert": ("AutoModelForMaskedLM", dict(TXT, num_key_value_heads=2, pad_token_id=0), "lm"),
 "nomic_bert": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0), "lm"),
 "gte": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0), "lm"),
 "yoso": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0, use_expectation=True), "lm"),
 "mra": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0, max_position_embeddings=130), "lm"),
 "ibert": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0, quant_mode=True), "lm"),
 "deberta": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0, relative_attention=True, pos_att_type=["p2c", "c2p"]), "lm"),
 "luke": ("AutoModelForMaskedLM", dict(TXT, pad_token_id=0, entity_vocab_size=100, entity_emb_size=32), "lm"),
 # encoders of transformers 5.24-5.25 (session 58)
 "esmc": ("AutoModelForMaskedLM", dict(TXT), "protein"),
 "ultrabert": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "neomme": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "jina_embeddings_v3": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "flaubert": ("AutoModelForMaskedLM", dict(vocab_size=1000, emb_dim=64, n_layers=2, n_heads=4), "lm"),
 "roc_bert": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 "xlm-roberta-xl": ("AutoModelForMaskedLM", dict(TXT), "lm"),
 # encoder-decoders
 "pegasus": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 "marian": ("AutoModelForSeq2SeqLM", dict(S2S, decoder_vocab_size=1000), "s2s"),
 "mbart": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 "led": ("AutoModelForSeq2SeqLM", dict(S2S, max_encoder_position_embeddings=128, max_decoder_position_embeddings=128, attention_window=16), "s2s"),
 "m2m_100": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 "switch_transformers": ("AutoModelForSeq2SeqLM", dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4, num_experts=4, num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, decoder_start_token_id=0, pad_token_id=0), "s2s"),
 "mt5": ("AutoModelForSeq2SeqLM", dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0), "s2s"),
 "longt5": ("AutoModelForSeq2SeqLM", dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, local_radius=8, decoder_start_token_id=0, pad_token_id=0), "s2s"),
 "blenderbot": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 "prophetnet": ("AutoModelForSeq2SeqLM", dict(vocab_size=1000, hidden_size=64, encoder_ffn_dim=128, decoder_ffn_dim=128, num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4, num_decoder_attention_heads=4, ngram=2, max_position_embeddings=128, decoder_start_token_id=1, pad_token_id=0), "s2s"),
 "bigbird_pegasus": ("AutoModelForSeq2SeqLM", dict(S2S, attention_type="original_full"), "s2s"),
 "plbart": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 "nllb-moe": ("AutoModelForSeq2SeqLM", dict(S2S, num_experts=4, expert_capacity=64, encoder_sparse_step=2, decoder_sparse_step=2), "s2s"),
 "bart": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 "t5": ("AutoModelForSeq2SeqLM", dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0), "s2s"),
 "umt5": ("AutoModelForSeq2SeqLM", dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0), "s2s"),
 "pegasus_x": ("AutoModelForSeq2SeqLM", dict(S2S, block_size=16, num_global_tokens=4), "s2s"),
 "t5gemma": ("AutoModelForSeq2SeqLM", dict(encoder=GQA, decoder=GQA, vocab_size=1000, pad_token_id=0, decoder_start_token_id=1), "s2s"),
 "blenderbot-small": ("AutoModelForSeq2SeqLM", dict(S2S), "s2s"),
 # vision
 "resnet": ("AutoModelForImageClassification", dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10), "img"),
 "regnet": ("AutoModelForImageClassification", dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], groups_width=8, num_labels=10), "img"),
 "mobilenet_v2": ("AutoModelForImageClassification", dict(depth_multiplier=0.35, image_size=64, num_labels=10), "img"),
 "beit": ("AutoModelForImageClassification", dict(TXT, image_size=64, patch_size=8, use_relative_position_bias=True, num_labels=10), "img"),
 "dinov2": ("AutoModelForImageClassification", dict(TXT, image_size=64, patch_size=8, num_labels=10), "img"),
 "segformer": ("AutoModelForImageClassification", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=64, num_labels=10), "img"),
 "mobilevit": ("AutoModelForImageClassification", dict(image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 32, 32, 64], num_labels=10), "img"),
 "poolformer": ("AutoModelForImageClassification", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10), "img"),
 "convnextv2": ("AutoModelForImageClassification", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10), "img"),
 "swinv2": ("AutoModelForImageClassification", dict(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10), "img"),
 "mobilenet_v1": ("AutoModelForImageClassification", dict(image_size=64, depth_multiplier=0.25, num_labels=10), "img"),
 "focalnet": ("AutoModelForImageClassification", dict(image_size=64, embed_dim=16, depths=[1, 1], focal_levels=[2, 2], num_labels=10), "img"),
 "vit_msn": ("AutoModelForImageClassification", dict(TXT, image_size=64, patch_size=8, num_labels=10), "img"),
 "data2vec-vision": ("AutoModelForImageClassification", dict(TXT, image_size=64, patch_size=8, num_labels=10), "img"),
 "efficientnet": ("AutoModelForImageClassification", dict(image_size=64, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320, num_labels=10), "img"),
 "bit": ("AutoModelForImageClassification", dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_groups=8, num_labels=10), "img"),
 "pvt_v2": ("AutoModelForImageClassification", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4], num_labels=10), "img"),
 "hiera": ("AutoModelForImageClassification", dict(image_size=[64, 64], embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 4], num_labels=10), "img"),
 "convnext": ("AutoModelForImageClassification", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10), "img"),
 "swin": ("AutoModelForImageClassification", dict(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10), "img"),
 "deit": ("DeiTForImageClassification", dict(TXT, image_size=64, patch_size=8, num_labels=10), "img"),
 "levit": ("LevitForImageClassification", dict(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[2, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=10), "img"),
 "cvt": ("AutoModelForImageClassification", dict(embed_dim=[16, 32, 64], num_heads=[1, 2, 4], depth=[1, 2, 3], drop_path_rate=[0.0, 0.0, 0.0], num_labels=10), "img"),
 "yolos": ("YolosForObjectDetection", dict(TXT, image_size=[64, 64], patch_size=8, num_detection_tokens=10, num_labels=10), "det"),
 "detr": ("DetrForObjectDetection", dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=dict(model_type="resnet", embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], out_features=["stage4"]), d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10, num_labels=10), "det"),
 "glpn": ("GLPNForDepthEstimation", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=32), "depth"),
 "dinov2_with_registers": ("AutoModelForImageClassification", dict(TXT, image_size=64, patch_size=8, num_register_tokens=4, num_labels=10), "img"),
 "ijepa": ("AutoModelForImageClassification", dict(TXT, image_size=64, patch_size=8, num_labels=10), "img"),
 "mobilevitv2": ("AutoModelForImageClassification", dict(image_size=64, width_multiplier=0.5, num_labels=10), "img"),
 "swiftformer": ("AutoModelForImageClassification", dict(depths=[1, 1, 1, 1], embed_dims=[16, 32, 64, 128], num_labels=10), "img"),
 "pvt": ("AutoModelForImageClassification", dict(image_size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4], num_labels=10), "img"),
 "textnet": ("AutoModelForImageClassification", dict(num_labels=10), "img"),
 "siglip": ("AutoModelForImageClassification", dict(vision_config=VIT, num_labels=10), "img"),
 "clip": ("AutoModelForImageClassification", dict(vision_config=VIT, num_labels=10), "img"),
 # vision models of transformers 5.24-5.25 (session 58)
 "hgnet_v2": ("AutoModelForImageClassification", dict(num_labels=10), "img"),
 # audio
 "wav2vec2": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0), "audio"),
 "hubert": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0), "audio"),
 "wavlm": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0, num_buckets=32, max_bucket_distance=64), "audio"),
 "sew": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0, squeeze_factor=2), "audio"),
 "unispeech": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0), "audio"),
 "data2vec-audio": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0), "audio"),
 "wav2vec2-conformer": ("AutoModelForCTC", dict(TXT, layerdrop=0.0, vocab_size=32, conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0, conv_depthwise_kernel_size=7, position_embeddings_type="rotary"), "audio"),
 "speech_to_text": ("AutoModelForSpeechSeq2Seq", dict(S2S, input_feat_per_channel=40, num_conv_layers=2, conv_channels=64, max_source_positions=256, max_target_positions=64), "fbank"),
 "whisper": ("AutoModelForSpeechSeq2Seq", dict(S2S, num_mel_bins=40, max_source_positions=100, max_target_positions=64), "mel"),
 "moonshine": ("AutoModelForSpeechSeq2Seq", dict(vocab_size=1000, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2, decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4, max_position_embeddings=128, pad_token_id=0, decoder_start_token_id=1), "speech_s2s"),
 # time series
 "patchtst": ("PatchTSTForPrediction", dict(num_input_channels=3, context_length=64, patch_length=8, patch_stride=8, prediction_length=8, d_model=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64), "series"),
 "patchtsmixer": ("PatchTSMixerForPrediction", dict(num_input_channels=3, context_length=64, patch_length=8, patch_stride=8, prediction_length=8, d_model=32, num_layers=2), "series"),
 "informer": ("InformerForPrediction", dict(prediction_length=8, context_length=32, lags_sequence=[1, 2, 3], num_time_features=1, input_size=1, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64), "tsf"),
 "autoformer": ("AutoformerForPrediction", dict(prediction_length=8, context_length=32, lags_sequence=[1, 2, 3], num_time_features=1, input_size=1, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64), "tsf"),
}

def inputs(kind: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if kind == "lm":
        ids = torch.randint(3, 1000, (2, 64), generator=g)
        return {"input_ids": ids, "labels": ids}
    if kind == "s2s":
        return {"input_ids": torch.randint(3, 1000, (2, 64), generator=g),
                "labels": torch.randint(3, 1000, (2, 32), generator=g)}  # fmt: skip
    if kind == "img":
        return {"pixel_values": torch.randn(4, 3, 64, 64, generator=g),
                "labels": torch.randint(0, 10, (4,), generator=g)}  # fmt: skip
    if kind == "cls":  # sequence classification (CANINE reads the ids as characters)
        return {"input_ids": torch.randint(3, 1000, (2, 64), generator=g), "labels": torch.randint(0, 2, (2,), generator=g)}
    if kind == "protein":  # ESM's 20-odd amino-acid tokens
        ids = torch.randint(4, 29, (2, 64), generator=g)
        return {"input_ids": ids, "labels": ids}
    if kind == "series":  # 64 steps of 3 channels, 8 to forecast
        return {"past_values": torch.randn(4, 64, 3, generator=g), "future_values": torch.randn(4, 8, 3, generator=g)}
    if kind == "det":  # object detection: three boxes an image
        return {"pixel_values": torch.randn(2, 3, 64, 64, generator=g),
                "labels": [{"class_labels": torch.randint(0, 10, (3,), generator=g),
                            "boxes": torch.rand(3, 4, generator=g) * 0.5 + 0.25} for _ in range(2)]}  # fmt: skip
    if kind == "depth":  # depth estimation: a positive depth a pixel
        return {"pixel_values": torch.randn(2, 3, 64, 64, generator=g), "labels": torch.rand(2, 64, 64, generator=g) + 0.5}
    if kind == "speech_s2s":  # raw audio to tokens
        return {"input_values": torch.randn(2, 8000, generator=g), "labels": torch.randint(3, 1000, (2, 16), generator=g)}
    if kind == "tsf":  # a probabilistic forecaster: 32 steps of context and the 3 lags before them, 8 to forecast
        past = 32 + 3
        return {"past_values": torch.randn(4, past, generator=g), "past_time_features": torch.randn(4, past, 1, generator=g),
                "past_observed_mask": torch.ones(4, past), "future_values": torch.randn(4, 8, generator=g),
                "future_time_features": torch.randn(4, 8, 1, generator=g)}  # fmt: skip
    if kind == "mel":  # Whisper's log-mel features: 40 bins, 200 frames
        return {"input_features": torch.randn(2, 40, 200, generator=g), "labels": torch.randint(3, 1000, (2, 16), generator=g)}
    if kind == "audio":  # half a second at 16 kHz, CTC targets
        return {"input_values": torch.randn(2, 8000, generator=g), "labels": torch.randint(1, 32, (2, 20), generator=g)}
    return {"input_features": torch.randn(2, 200, 40, generator=g),  # filter-bank features
            "labels": torch.randint(3, 1000, (2, 16), generator=g)}  # fmt: skip


#: --precision -> how the step computes: its weights' type, and the type ``torch.autocast`` casts to
PRECISIONS = {"fp32": (torch.float32, None), "autocast-bf16": (torch.float32, torch.bfloat16),
              "autocast-fp16": (torch.float32, torch.float16), "bf16": (torch.bfloat16, None)}  # fmt: skip


def make(name: str, train: bool, precision: str = "fp32", infer_grad: bool = False):
    """The model's training step (loss, backward, AdamW) or inference step (no grad), with its
    weights and floating inputs in the type ``precision`` names, its forward pass under
    ``torch.autocast`` where it names one. A diffusers model (:data:`diffusion_models.DIFFUSION`)
    trains as a denoiser does: the squared error of its output against noise drawn each step; a
    graph network (:data:`graph_models.GRAPHS`) classifies nodes. ``infer_grad``: the inference
    step runs with grad mode on (see :func:`hf_step`)."""
    if name in DIFFUSION:
        model, x = DIFFUSION[name]()
        return hf_step(model, x, train, precision=precision, loss=denoising_loss, infer_grad=infer_grad)
    if name in GRAPHS or name in LIBRARIES:
        model, x, loss, *optimizer = (GRAPHS.get(name) or LIBRARIES[name])()  # (a library's model may name its optimizer)
        return hf_step(model, x, train, precision=precision, loss=loss, optimizer=optimizer[0] if optimizer else None,
                       infer_grad=infer_grad)  # fmt: skip
    if name in MULTIMODAL:
        model, x = MULTIMODAL[name]()
        return hf_step(model, x if train else {k: v for k, v in x.items() if k not in TRAINING_ONLY}, train,
                       precision=precision, infer_grad=infer_grad)  # fmt: skip
    cls, kw, kind = MODELS[name]
    torch.manual_seed(0)
    config, klass = tf.AutoConfig.for_model(name, **kw), getattr(tf, cls)
    model = klass.from_config(config) if cls.startswith("AutoModel") else klass(config)
    x = inputs(kind)
    if not train:
        x = {k: v for k, v in x.items() if k not in ("labels", "future_values") or kind in ("s2s", "fbank", "mel", "speech_s2s")}  # a decoder needs its input
    return hf_step(model, x, train, precision=precision, infer_grad=infer_grad)


def denoising_loss(out) -> torch.Tensor:
    """A diffusion model's training loss: its prediction (``.sample``, or the first of a tuple)
    against Gaussian noise of its shape, as a denoiser learns to predict the noise it was given."""
    pred = out[0] if isinstance(out, tuple) else out.sample
    return torch.nn.functional.mse_loss(pred.float(), torch.randn_like(pred, dtype=torch.float32))


def hf_step(model, x: dict, train: bool, lr: float = 1e-4, precision: str = "fp32", loss=lambda out: out.loss,
            optimizer=None, infer_grad: bool = False):  # fmt: skip
    """A transformers (or diffusers) model's step on inputs ``x``: its inference in eval mode under
    ``no_grad``, or its training (``loss`` of its output, backward, an AdamW step), in the
    ``precision`` of :data:`PRECISIONS`:
    the model and the floating tensors of ``x`` converted to its weights' type, the forward pass
    under ``torch.autocast`` where it names a type (the backward pass outside it, as the autocast
    recipes have it). ``optimizer(parameters)``, where given, makes the training step's optimizer
    in AdamW's place. ``infer_grad``: the inference step runs in eval mode with grad mode on, as a
    model called without ``torch.no_grad`` does (its parameters require grad, so its ops record
    autograd graphs that nothing uses)."""
    weights, autocast = PRECISIONS[precision]
    if weights != torch.float32:
        model.to(weights)
        x = {k: v.to(weights) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in x.items()}
    cast = (lambda: torch.autocast("cpu", dtype=autocast)) if autocast is not None else contextlib.nullcontext
    if not train:
        model.eval()

        def infer():
            with torch.set_grad_enabled(infer_grad), cast():
                model(**x)

        return infer
    opt = (optimizer or (lambda params: torch.optim.AdamW(params, lr=lr)))(model.parameters())

    def step():
        opt.zero_grad()
        with cast():
            value = loss(model(**x))
        value.backward()
        opt.step()

    return step


def timed(f, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def zoo_calls(at_least: int, step_s: float) -> int:
    """How many profiled calls of each side (:func:`measure.profiled_calls`): ``at_least`` (``--ops``),
    more for a short step, up to eight times as many."""
    return profiled_calls(step_s, at_least, most=8 * at_least)


#: Notes every training step gets, left out of the table's count.
ROUTINE = ("optimizer state", "through their parts", "autograd recording their graph")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    families = {"transformers": [*MODELS], "multimodal": [*MULTIMODAL], "diffusers": [*DIFFUSION], "graphs": [*GRAPHS],
                "libraries": [*LIBRARIES], "all": [*MODELS, *MULTIMODAL, *DIFFUSION, *GRAPHS, *LIBRARIES]}  # fmt: skip
    missing = {"diffusers": ("diffusers", NO_DIFFUSERS), "graphs": ("torch_geometric", NO_PYG),
               "multimodal": ("transformers", NO_MULTIMODAL)}  # fmt: skip
    ap.add_argument("models", nargs="*", help="some of: " + ", ".join(families["all"]))
    ap.add_argument("--ops", type=int, default=0, metavar="N",
                    help="also compare the time inside operators over N or more alternated profiled calls of each "
                         "side (measure.inside_operators; up to 8N for a short step): the part of a step that a "
                         "trace holds")  # fmt: skip
    op_timer_option(ap, {"both": "the profiler and the clock, one after the other, each in a column"})
    ap.add_argument("--family", choices=tuple(families), default="transformers",
                    help="the models run when none is named: transformers' (the default), transformers' "
                         "vision-language models (benchmarks/multimodal_models.py), diffusers' "
                         "(benchmarks/diffusion_models.py; needs diffusers), PyTorch Geometric's graph networks "
                         "(benchmarks/graph_models.py; needs torch_geometric), models of other PyTorch libraries "
                         "(benchmarks/library_models.py; each needs its library), or all")  # fmt: skip
    ap.add_argument("--steps", choices=("both", "train", "infer"), default="both",
                    help="the training steps, the inference steps, or both (the default)")
    ap.add_argument("--infer-with-grad", action="store_true",
                    help="run the inference steps with grad mode on (no torch.no_grad), as a model called as it is")
    ap.add_argument("--without-records", action="store_true",
                    help="replay each trace as one captured elsewhere: its sidecar keeps the original's timings "
                         "and loses the capture's records of the step's inputs (sidecar.INPUT_RECORDS)")  # fmt: skip
    ap.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                    help="the steps' weights and inputs in float32 (the default) or bfloat16 (bf16), or float32 "
                         "with the forward pass under torch.autocast to bfloat16 or float16")  # fmt: skip
    args = ap.parse_args()
    for family, (package, why) in missing.items():
        if args.family in (family, "all") and why:
            ap.error(f"--family {args.family} needs the {package} package (pip install {package}): {why}")
    unknown = [m for m in args.models if m not in families["all"]]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(families['all'])}")
    global tf
    import transformers as tf

    tf.logging.set_verbosity_error()
    if not NO_DIFFUSERS:
        import diffusers

        diffusers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    steady_allocator()  # as the plugin does before timing
    tmp = Path(tempfile.mkdtemp(prefix="zoo."))
    timers = ("profiler", "dispatch") if args.op_timer == "both" else (args.op_timer,)
    heads = {"profiler": "op ratio", "dispatch": "dispatch"}
    extra = "".join(f" {heads[t]:>8}" for t in timers) + f" {'host':>5}" if args.ops else ""
    print(f"{'trace':<28} {'ops':>11} {'skip':>4} {'subst':>5} {'notes':>5} {'runs':>4} {'orig ms':>8} {'ratio':>6}{extra}  notes")
    full = total = skipped_ratios = unrunnable = 0
    ratios, op_ratios = [], {t: [] for t in timers}
    for name in args.models or families[args.family]:
        for train in {"both": (True, False), "train": (True,), "infer": (False,)}[args.steps]:
            label = f"{name}_{'train' if train else 'infer'}"
            total += 1
            try:
                step = make(name, train, args.precision, args.infer_with_grad)
                step()  # (an original that fails in this precision is not the replay's failure)
            except Exception as e:  # noqa: BLE001 - reported in the table
                print(f"{label:<28} original fails: {type(e).__name__}: {str(e)[:110]}")
                unrunnable += 1
                continue
            try:
                path = tmp / f"{label}.json.gz"
                capture_step(step, path, warmup=2, runs=1, min_warmup_s=0)
                if args.without_records:
                    side = sidecar_path(path)
                    kept = {k: v for k, v in json.loads(side.read_text()).items() if k not in INPUT_RECORDS}
                    side.write_text(json.dumps(kept))
                replay = Replay(load_trace(path), "cpu")
                build_canary(replay)  # (a kernel that crashes on the replay's data fails this model alone, as in the plugin)
                replay.prepare()
            except Exception as e:  # noqa: BLE001 - reported in the table
                print(f"{label:<28} failed: {type(e).__name__}: {str(e)[:120]}")
                continue
            rep = replay.report
            # two recorded calls ran different operators (the capture's check): the original's
            # timing covers calls other than the traced one, so no ratio of the two means anything
            varies = bool((load_sidecar(path) or {}).get("recorded_ops_differ"))
            skipped_ratios += varies

            def run(replay=replay):
                with torch.no_grad():
                    replay.run()

            runs, ratio, extra, grew = "ok", None, " " * (6 + 9 * len(timers)) if args.ops else "", None
            try:
                orig, rep_t = [], []
                for _ in range(6):
                    orig += timed(step, 2)
                    replay.between_iterations()
                    rep_t += timed(run, 2)
                ratio = statistics.median(rep_t) / statistics.median(orig)
                if not varies:
                    ratios.append(ratio)
                if args.ops:
                    calls = zoo_calls(args.ops, statistics.median(orig))
                    got = {t: inside_operators_alternated((step, run), calls, (None, replay.between_iterations), timer=t)
                           for t in timers}  # fmt: skip
                    # the original's work changed over these calls (an adaptive solver's steps growing as
                    # training moves its field): like two recorded calls that differ, no ratio holds
                    counted = got[timers[0]][0].counts
                    if counted and min(counted) != max(counted) and not varies:
                        varies = True
                        skipped_ratios += 1
                        ratios.pop()
                        grew = f"the original's profiled calls ran {min(counted)} to {max(counted)} operators"
                    for t, (o, r) in got.items():  # (each instrument's ratio where all of them measured)
                        if not varies:
                            op_ratios[t].append(r.ops_s / o.ops_s)
                    # the original's share outside operators, by the first instrument
                    extra = "".join(f" {r.ops_s / o.ops_s:8.3f}" for o, r in got.values()) + f" {1 - got[timers[0]][0].share:5.0%}"
            except Exception as e:  # noqa: BLE001 - reported in the table
                runs = "failed"
                print(f"   run failed: {str(e)[:160]}")
            notes = [n for n in rep.notes if not any(w in n for w in ROUTINE)]
            if varies:
                notes.insert(0, f"VARIES: {grew if grew else 'two calls of the step ran different operators'}; ratios left out")
            full += rep.ops_skipped == 0 and runs == "ok"
            ops = f"{rep.ops_replayed}/{rep.ops_total}"
            shown = f"{ratio:6.3f}" if ratio else "     -"
            print(f"{label:<28} {ops:>11} {rep.ops_skipped:>4} {sum(rep.substitutions.values()):>5} {len(notes):>5} "
                  f"{runs:>4} {statistics.median(orig) * 1e3 if ratio else 0:8.2f} {shown}{extra}  "
                  f"{'; '.join(n[:70] for n in notes)[:160]}")  # fmt: skip
            for s in rep.skipped_list()[:3]:
                print(f"   skipped {s['count']}x {s['op']}: {s['reason'][:120]}")
    left = f"; {skipped_ratios} whose step varies from call to call left out of the ratios" if skipped_ratios else ""
    if unrunnable:
        left += f"; {unrunnable} original step(s) fail in {args.precision} (nothing to capture)"
    spread = (f"{min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.3f} (rough: blocks of 2)"
              if ratios else "none timed")  # fmt: skip
    print(f"model zoo: {full}/{total - unrunnable} traces replay every op and run; replay/original {spread}{left}")
    for t, got in op_ratios.items():
        if not got:
            continue
        errors = [abs(r - 1) for r in got]
        print(f"time inside operators{timer_label(t)}, replay/original: {min(got):.3f}-{max(got):.3f}, geomean "
              f"|ratio-1| {100 * math.exp(statistics.mean(math.log(max(e, 1e-6)) for e in errors)):.1f}%, within 5%: "
              f"{sum(e <= 0.05 for e in errors)}/{len(errors)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
