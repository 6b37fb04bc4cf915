"""Small diffusers models, built from their configs with random weights, for the model zoo
(``python benchmarks/model_zoo.py --family diffusers``): a family of workloads no other part of the
project uses, whose operators differ from the transformers models' (group norms, up- and
down-sampling convolutions in 1, 2 and 3 dimensions, video VAEs' causal convolutions and feature
caches, adaptive layer norms, joint text-image attention, linear attention, complex rotary tables).

``DIFFUSION[name]()`` gives ``(model, x)``: ``model(**x)`` is one forward pass, whose output has a
``.sample`` or is a tuple whose first item is the prediction. ``x`` holds only tensors; the other
arguments a model wants (Python numbers, shape lists, rotary tables, ``return_dict=False``) are
bound in a small wrapper module. Each builder seeds torch first, so two calls give the same model
and inputs; batch 2, dropout 0. With torch 2.13 and diffusers 0.42 each trains in 5-70 ms at one
CPU thread, and each runs in bfloat16 and under autocast too. Where a model's own forward does not
suit a training step, the builder says why (AutoencoderTiny rounds its latents to bytes, which cuts
the gradient to the encoder; Hunyuan-DiT takes its embeddings' type from the timestep's, so its
timesteps are floats).
"""

from collections.abc import Callable

import diffusers
import torch
from diffusers.models.embeddings import get_2d_rotary_pos_embed, get_2d_rotary_pos_embed_lumina

B = 2  # batch size


class _Wrap(torch.nn.Module):
    """``model(**x, **static)``, its output mapped by ``pick`` where one is given."""

    def __init__(self, model, pick=None, **static):
        super().__init__()
        self.model, self.pick, self.static = model, pick, static

    def forward(self, **x):
        out = self.model(**x, **self.static)
        return self.pick(out) if self.pick is not None else out


def _t(*vals):  # integer timesteps, one per batch element
    return torch.tensor(vals, dtype=torch.long)


def _latents_and_text(**more):  # a 16x16 latent of 4 channels, 8 text tokens of 32, timesteps 10 and 500
    x = dict(hidden_states=torch.randn(B, 4, 16, 16), encoder_hidden_states=torch.randn(B, 8, 32), timestep=_t(10, 500))
    return x | {k: make() for k, make in more.items()}  # (drawn after the latents and the text, in that order)


# ----------------------------------------------------------------------------------------------- UNets
def unet2d_condition():  # SD-style latent UNet with cross-attention to text tokens
    torch.manual_seed(0)
    m = diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    return m, dict(sample=torch.randn(B, 4, 16, 16), timestep=_t(10, 500), encoder_hidden_states=torch.randn(B, 8, 32))


def unet2d():  # DDPM pixel-space UNet (self-attention at the low resolution)
    torch.manual_seed(0)
    m = diffusers.UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=8, norm_num_groups=8)
    return m, dict(sample=torch.randn(B, 3, 16, 16), timestep=_t(10, 500))


def unet1d():  # 1D temporal UNet (Diffuser-style trajectory planner)
    torch.manual_seed(0)
    m = diffusers.UNet1DModel(
        in_channels=14, out_channels=14, block_out_channels=(32, 64, 64), layers_per_block=1,
        down_block_types=("DownResnetBlock1D",) * 3, up_block_types=("UpResnetBlock1D",) * 2,
        mid_block_type="MidResTemporalBlock1D", out_block_type="OutConv1DBlock", act_fn="mish",
        time_embedding_type="positional", use_timestep_embedding=True, flip_sin_to_cos=False, freq_shift=1.0,
        norm_num_groups=8)
    return m, dict(sample=torch.randn(B, 14, 32), timestep=_t(10, 500))


def unet3d_condition():  # text-to-video UNet (ModelScope-style), spatial + temporal attention
    torch.manual_seed(0)
    m = diffusers.UNet3DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 32), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"), up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    for mod in m.modules():  # TemporalConvLayer hard-codes dropout=0.1
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    return m, dict(sample=torch.randn(B, 4, 2, 8, 8), timestep=_t(10, 500), encoder_hidden_states=torch.randn(B, 8, 32))


def unet_spatiotemporal():  # Stable Video Diffusion UNet (frames as a separate axis)
    torch.manual_seed(0)
    m = diffusers.UNetSpatioTemporalConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 32), layers_per_block=1,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        cross_attention_dim=32, num_attention_heads=(2, 4), addition_time_embed_dim=16,
        projection_class_embeddings_input_dim=48, num_frames=2)  # norm groups fixed at 32 -> channels >= 32
    return m, dict(sample=torch.randn(B, 2, 4, 8, 8), timestep=_t(10, 500),
                   encoder_hidden_states=torch.randn(B, 1, 32), added_time_ids=torch.randn(B, 3))


def controlnet():  # SD ControlNet; output tuple = (mid-block residual, *down-block residuals)
    torch.manual_seed(0)
    m = diffusers.ControlNetModel(
        in_channels=4, block_out_channels=(32, 64), layers_per_block=1, norm_num_groups=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), cross_attention_dim=32, attention_head_dim=8,
        conditioning_embedding_out_channels=(16, 32))
    for zero_conv in [m.controlnet_mid_block, *m.controlnet_down_blocks]:  # zero-initialised -> make non-trivial
        torch.nn.init.normal_(zero_conv.weight, std=0.05)
    w = _Wrap(m, pick=lambda o: (o[1], *o[0]), return_dict=False)
    return w, dict(sample=torch.randn(B, 4, 16, 16), timestep=_t(10, 500), encoder_hidden_states=torch.randn(B, 8, 32),
                   controlnet_cond=torch.randn(B, 3, 32, 32))


def kandinsky3_unet():  # Kandinsky 3 UNet (cross-attention to text, conditional group norms)
    torch.manual_seed(0)
    m = diffusers.Kandinsky3UNet(
        in_channels=4, time_embedding_dim=32, groups=8, attention_head_dim=16,
        layers_per_block=2,  # layers_per_block=1 crashes in forward (shape mismatch)
        block_out_channels=(32, 64), cross_attention_dim=32, encoder_hid_dim=32)
    return m, dict(sample=torch.randn(B, 4, 8, 8), timestep=_t(10, 500), encoder_hidden_states=torch.randn(B, 8, 32),
                   encoder_attention_mask=torch.ones(B, 8))


def stable_cascade_unet():  # Stable Cascade (Wuerstchen v3) UNet with res / timestep / attention blocks
    torch.manual_seed(0)
    m = diffusers.StableCascadeUNet(
        in_channels=4, out_channels=4, timestep_ratio_embedding_dim=32, conditioning_dim=32,
        block_out_channels=(32, 64), num_attention_heads=(2, 4), down_num_layers_per_block=(1, 1),
        up_num_layers_per_block=(1, 1), down_blocks_repeat_mappers=(1, 1), up_blocks_repeat_mappers=(1, 1),
        clip_text_pooled_in_channels=32, clip_seq=4, dropout=(0.0, 0.0), self_attn=True,
        timestep_conditioning_type=("sca",))
    return m, dict(sample=torch.randn(B, 4, 16, 16), timestep_ratio=torch.tensor([0.3, 0.7]),
                   clip_text_pooled=torch.randn(B, 1, 32))


# ------------------------------------------------------------------------------------------ autoencoders
def autoencoder_kl():  # SD image VAE (encode -> posterior mode -> decode)
    torch.manual_seed(0)
    m = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(32, 64), layers_per_block=1, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8)
    return m, dict(sample=torch.randn(B, 3, 32, 32))


def vq_model():  # VQ-GAN style autoencoder (vector quantisation, straight-through)
    torch.manual_seed(0)
    m = diffusers.VQModel(
        in_channels=3, out_channels=3, block_out_channels=(32, 64), layers_per_block=1, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8,
        num_vq_embeddings=64)
    return m, dict(sample=torch.randn(B, 3, 32, 32))


class _EncDec(torch.nn.Module):
    """encode -> decode round trip (skips AutoencoderTiny.forward's uint8 latent quantisation, which cuts the
    graph to the encoder and forces float32)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, sample):
        return self.model.decode(self.model.encode(sample).latents)


def autoencoder_tiny():  # TAESD tiny VAE (plain conv stacks), encode -> decode
    torch.manual_seed(0)
    m = diffusers.AutoencoderTiny(
        encoder_block_out_channels=(32, 32), decoder_block_out_channels=(32, 32),
        num_encoder_blocks=(1, 2), num_decoder_blocks=(2, 1), latent_channels=4)
    return _EncDec(m), dict(sample=torch.randn(B, 3, 32, 32))


def autoencoder_kl_temporal_decoder():  # SVD VAE: 2D encoder, decoder with temporal convs (2 clips x 2 frames)
    torch.manual_seed(0)
    m = diffusers.AutoencoderKLTemporalDecoder(
        block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2, layers_per_block=1,
        latent_channels=4)
    return _Wrap(m, num_frames=2), dict(sample=torch.randn(2 * B, 3, 16, 16))


def autoencoder_kl_wan():  # Wan 2.1 causal 3D video VAE (frame-chunked, feature cache)
    torch.manual_seed(0)
    m = diffusers.AutoencoderKLWan(
        base_dim=8, z_dim=4, dim_mult=[1, 2], num_res_blocks=1, temperal_downsample=[True],
        latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    return m, dict(sample=torch.randn(B, 3, 5, 16, 16))


def autoencoder_kl_cogvideox():  # CogVideoX causal 3D video VAE
    torch.manual_seed(0)
    m = diffusers.AutoencoderKLCogVideoX(
        block_out_channels=(16, 16, 32, 32), latent_channels=4, layers_per_block=1, norm_num_groups=4,
        down_block_types=("CogVideoXDownBlock3D",) * 4, up_block_types=("CogVideoXUpBlock3D",) * 4,
        temporal_compression_ratio=4)
    return m, dict(sample=torch.randn(B, 3, 9, 16, 16))  # 1 + 4k frames -> output has the same shape


def autoencoder_oobleck():  # Stable Audio VAE for stereo waveforms (1D convs, snake activations)
    torch.manual_seed(0)
    m = diffusers.AutoencoderOobleck(
        encoder_hidden_size=16, downsampling_ratios=[2, 4], channel_multiples=[1, 2], decoder_channels=16,
        decoder_input_channels=8, audio_channels=2)
    return m, dict(sample=torch.randn(B, 2, 1024))


def autoencoder_dc():  # Deep-compression autoencoder (Sana), ResBlocks + EfficientViT linear attention
    torch.manual_seed(0)
    m = diffusers.AutoencoderDC(
        in_channels=3, latent_channels=4, attention_head_dim=8,
        encoder_block_types=("ResBlock", "EfficientViTBlock"), decoder_block_types=("ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(32, 32), decoder_block_out_channels=(32, 32),
        encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
        encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
        upsample_block_type="interpolate", downsample_block_type="stride_conv",
        decoder_norm_types="rms_norm", decoder_act_fns="silu")
    return m, dict(sample=torch.randn(B, 3, 32, 32))


# ------------------------------------------------------------------------------------------ transformers
def dit():  # DiT, class-conditional, adaLN-zero
    torch.manual_seed(0)
    m = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
        sample_size=16, patch_size=2, num_embeds_ada_norm=1000)
    for mod in m.modules():  # no random class-label dropout (CFG training) -> deterministic values
        if isinstance(mod, diffusers.models.embeddings.LabelEmbedding):
            mod.dropout_prob = 0.0
    return m, dict(hidden_states=torch.randn(B, 4, 16, 16), timestep=_t(10, 500), class_labels=_t(1, 7))


def pixart():  # PixArt-alpha, cross-attention to text, adaLN-single
    torch.manual_seed(0)
    m = diffusers.PixArtTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
        cross_attention_dim=32, caption_channels=32, sample_size=16, patch_size=2, use_additional_conditions=False)
    return m, _latents_and_text()


def sd3():  # Stable Diffusion 3 MMDiT (joint attention over image + text tokens)
    torch.manual_seed(0)
    m = diffusers.SD3Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32,
        pos_embed_max_size=16)
    return m, _latents_and_text(pooled_projections=lambda: torch.randn(B, 32))


def flux():  # FLUX.1 (double-stream + single-stream blocks, 3-axis RoPE, packed 2x2 latents)
    torch.manual_seed(0)
    m = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 4, 8))
    h = w = 8  # 16x16 latent with 4 channels, packed 2x2 -> 64 tokens x 16 channels
    img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(h).float(), torch.arange(w).float(),
                                         indexing="ij"), -1).reshape(-1, 3)
    return m, dict(hidden_states=torch.randn(B, h * w, 16), encoder_hidden_states=torch.randn(B, 8, 32),
                   pooled_projections=torch.randn(B, 32), timestep=torch.tensor([0.2, 0.8]),
                   img_ids=img_ids, txt_ids=torch.zeros(8, 3))


def sana():  # Sana linear-attention DiT (Mix-FFN, cross-attention to text)
    torch.manual_seed(0)
    m = diffusers.SanaTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2,
        num_cross_attention_heads=2, cross_attention_head_dim=16, cross_attention_dim=32, caption_channels=32,
        sample_size=16, patch_size=1)
    return m, _latents_and_text()


def hunyuan_dit():  # Hunyuan-DiT (two text encoders, 2D RoPE, long skip connections)
    torch.manual_seed(0)
    m = diffusers.HunyuanDiT2DModel(
        sample_size=16, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
        hidden_size=32, cross_attention_dim=32, cross_attention_dim_t5=32, pooled_projection_dim=16,
        text_len=8, text_len_t5=8)
    rope = get_2d_rotary_pos_embed(16, ((0, 0), (8, 8)), (8, 8))  # (cos, sin) for the 8x8 patch grid
    x = dict(hidden_states=torch.randn(B, 4, 16, 16), timestep=torch.tensor([10.0, 500.0]),  # float: sets emb dtype
             encoder_hidden_states=torch.randn(B, 8, 32), text_embedding_mask=torch.ones(B, 8, dtype=torch.long),
             encoder_hidden_states_t5=torch.randn(B, 8, 32), text_embedding_mask_t5=torch.ones(B, 8, dtype=torch.long),
             image_meta_size=torch.tensor([[128, 128, 128, 128, 0, 0]] * B).float(), style=torch.zeros(B, dtype=torch.long))
    return _Wrap(m, image_rotary_emb=rope), x


def auraflow():  # AuraFlow (MMDiT layers followed by single-stream DiT layers)
    torch.manual_seed(0)
    m = diffusers.AuraFlowTransformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_mmdit_layers=1, num_single_dit_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
        pos_embed_max_size=64)
    return m, _latents_and_text()


def wan():  # Wan 2.1 video DiT (3D RoPE, cross-attention to text)
    torch.manual_seed(0)
    m = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32)
    return m, dict(hidden_states=torch.randn(B, 4, 2, 16, 16), timestep=_t(10, 500),
                   encoder_hidden_states=torch.randn(B, 8, 32))


def cogvideox():  # CogVideoX video DiT (expert adaLN, full 3D attention with text)
    torch.manual_seed(0)
    m = diffusers.CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=32,
        text_embed_dim=32, num_layers=2, sample_width=16, sample_height=16, sample_frames=5, patch_size=2,
        temporal_compression_ratio=4, max_text_seq_length=8)
    return m, dict(hidden_states=torch.randn(B, 2, 4, 16, 16), encoder_hidden_states=torch.randn(B, 8, 32),
                   timestep=_t(10, 500))


def ltx_video():  # LTX-Video DiT (tokens pre-flattened, 3D RoPE from frames/height/width)
    torch.manual_seed(0)
    m = diffusers.LTXVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16, cross_attention_dim=32,
        num_layers=2, caption_channels=32)
    x = dict(hidden_states=torch.randn(B, 2 * 8 * 8, 4), encoder_hidden_states=torch.randn(B, 8, 32),
             timestep=_t(10, 500), encoder_attention_mask=torch.ones(B, 8, dtype=torch.long))
    return _Wrap(m, num_frames=2, height=8, width=8), x


def lumina_next():  # Lumina-Next DiT (GQA, complex 2D RoPE, sandwich norms)
    torch.manual_seed(0)
    m = diffusers.LuminaNextDiT2DModel(
        sample_size=16, patch_size=2, in_channels=4, hidden_size=32, num_layers=2, num_attention_heads=2,
        num_kv_heads=1, multiple_of=16, learn_sigma=True, qk_norm=True, cross_attention_dim=32)
    torch.nn.init.normal_(m.pad_token, std=0.02)  # created with torch.empty (uninitialised memory)
    rope = get_2d_rotary_pos_embed_lumina(16, 32, 32)  # complex table, bound in the wrapper
    x = dict(hidden_states=torch.randn(B, 4, 16, 16), timestep=torch.tensor([0.2, 0.8]),
             encoder_hidden_states=torch.randn(B, 8, 32), encoder_mask=torch.ones(B, 8, dtype=torch.long))
    return _Wrap(m, image_rotary_emb=rope, cross_attention_kwargs={}), x


def qwen_image():  # Qwen-Image MMDiT (dual-stream, 3-axis RoPE from img_shapes)
    torch.manual_seed(0)
    m = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=32, axes_dims_rope=(4, 4, 8))
    x = dict(hidden_states=torch.randn(B, 8 * 8, 16), encoder_hidden_states=torch.randn(B, 8, 32),
             encoder_hidden_states_mask=torch.ones(B, 8, dtype=torch.long), timestep=torch.tensor([0.2, 0.8]))
    return _Wrap(m, img_shapes=[[(1, 8, 8)]] * B), x


def prior_transformer():  # unCLIP / Kandinsky prior (text -> CLIP image embedding); output tuple
    torch.manual_seed(0)
    m = diffusers.PriorTransformer(
        num_attention_heads=4, attention_head_dim=16, num_layers=2, embedding_dim=64, num_embeddings=16,
        additional_embeddings=4)
    x = dict(hidden_states=torch.randn(B, 64), timestep=_t(10, 500), proj_embedding=torch.randn(B, 64),
             encoder_hidden_states=torch.randn(B, 16, 64))
    return _Wrap(m, return_dict=False), x


DIFFUSION: dict[str, Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]] = {
    "unet2d_condition": unet2d_condition,
    "unet2d": unet2d,
    "unet1d": unet1d,
    "unet3d_condition": unet3d_condition,
    "unet_spatiotemporal": unet_spatiotemporal,
    "controlnet": controlnet,
    "kandinsky3_unet": kandinsky3_unet,
    "stable_cascade_unet": stable_cascade_unet,
    "autoencoder_kl": autoencoder_kl,
    "vq_model": vq_model,
    "autoencoder_tiny": autoencoder_tiny,
    "autoencoder_kl_temporal_decoder": autoencoder_kl_temporal_decoder,
    "autoencoder_kl_wan": autoencoder_kl_wan,
    "autoencoder_kl_cogvideox": autoencoder_kl_cogvideox,
    "autoencoder_oobleck": autoencoder_oobleck,
    "autoencoder_dc": autoencoder_dc,
    "dit": dit,
    "pixart": pixart,
    "sd3": sd3,
    "flux": flux,
    "sana": sana,
    "hunyuan_dit": hunyuan_dit,
    "auraflow": auraflow,
    "wan": wan,
    "cogvideox": cogvideox,
    "ltx_video": ltx_video,
    "lumina_next": lumina_next,
    "qwen_image": qwen_image,
    "prior_transformer": prior_transformer,
}
