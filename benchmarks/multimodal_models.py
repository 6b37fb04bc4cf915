"""Small vision-language models of transformers, built from their configs with random weights,
for the model zoo (``python benchmarks/model_zoo.py --family multimodal``): workloads whose steps
join two towers, and whose operators the text-only and vision-only models do not run: image
features put into the text's embeddings at its image tokens (``masked_scatter``, ``x[mask] = v``),
a mask given with the batch (Kosmos-2's), multimodal rotary positions computed from the ids
(Qwen2-VL's, GLM-4V's), a perceiver resampler (Idefics2), a Q-Former (BLIP-2), cross-attention
layers over image tiles (Mllama), a VQ tokenizer's codebook lookup (Chameleon), contrastive
losses (CLIP, SigLIP), patches as text-model inputs (Fuyu, Pix2Struct), any-resolution tiles
(LLaVA-NeXT).

``MULTIMODAL[name]()`` gives ``(model, x)``: ``model(**x)`` is one training forward pass whose
output has a ``.loss``; for inference the model zoo drops ``labels`` and ``return_loss``. The ids
hold each model's image token at as many positions as its image features fill (otherwise the
models refuse them). Each builder seeds torch first, so two calls give the same model and
inputs; batch 2 (4 for the contrastive models), a 64x64 image of 8x8 patches, 2 layers a tower
of width 64.
"""

from collections.abc import Callable

import torch
import transformers as tf

#: the image token's id in every model's vocabulary of 1000 (its start and end markers below it)
IMAGE, START, END = 999, 998, 997
TEXT = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=512, num_key_value_heads=2)  # fmt: skip
VISION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=64,
              patch_size=8)  # fmt: skip
#: Qwen-style vision towers: a 64x64 image as 8x8 patches of two frames, merged 2x2 into 16 tokens
GRID = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64, patch_size=8,
            spatial_merge_size=2, temporal_patch_size=2)  # fmt: skip
MROPE = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 2, 4])


def _ids(images: int, total: int = 96, batch: int = 2) -> torch.Tensor:
    """Token ids with the image token at ``images`` positions of each row, from the second on."""
    ids = torch.randint(3, 900, (batch, total), generator=torch.Generator().manual_seed(1))
    ids[:, 1 : 1 + images] = IMAGE
    return ids


def _with_labels(ids: torch.Tensor, **x) -> dict:
    return dict(input_ids=ids, labels=ids, **x)


def _grid_inputs(ids: torch.Tensor) -> dict:
    """A Qwen-style model's inputs: flattened patches, each image's grid, the token types."""
    return _with_labels(ids, pixel_values=torch.randn(2 * 64, 3 * 2 * 8 * 8),
                        image_grid_thw=torch.tensor([[1, 8, 8], [1, 8, 8]]), mm_token_type_ids=(ids == IMAGE).long())  # fmt: skip


def llava():
    cfg = tf.LlavaConfig(vision_config=dict(VISION, model_type="clip_vision_model"),
                         text_config=dict(TEXT, model_type="llama"), image_token_id=IMAGE, vision_feature_layer=-1)  # fmt: skip
    return tf.LlavaForConditionalGeneration(cfg), _with_labels(_ids(64), pixel_values=torch.randn(2, 3, 64, 64))


def llava_next():  # a 64x128 image: its base view (64 tokens) and 2 tiles unpadded (8 x 16) with 8 newlines
    cfg = tf.LlavaNextConfig(vision_config=dict(VISION, model_type="clip_vision_model"),
                             text_config=dict(TEXT, model_type="llama"), image_token_index=IMAGE,
                             image_grid_pinpoints=[[64, 64], [64, 128]], vision_feature_layer=-1)  # fmt: skip
    n = 64 + 128 + 8
    return tf.LlavaNextForConditionalGeneration(cfg), _with_labels(
        _ids(n, total=n + 20), pixel_values=torch.randn(2, 3, 3, 64, 64), image_sizes=torch.tensor([[64, 128]] * 2))


def paligemma():
    cfg = tf.PaliGemmaConfig(vision_config=dict(VISION, model_type="siglip_vision_model"),
                             text_config=dict(TEXT, model_type="gemma", head_dim=16), image_token_id=IMAGE,
                             projection_dim=64)  # fmt: skip
    ids = _ids(64)
    return tf.PaliGemmaForConditionalGeneration(cfg), _with_labels(
        ids, pixel_values=torch.randn(2, 3, 64, 64), token_type_ids=(ids == IMAGE).long())


def gemma3():
    cfg = tf.Gemma3Config(vision_config=dict(VISION, model_type="siglip_vision_model"),
                          text_config=dict(TEXT, head_dim=16, sliding_window=16), mm_tokens_per_image=16,
                          image_token_index=IMAGE, boi_token_index=START, eoi_token_index=END)  # fmt: skip
    ids = _ids(16)
    return tf.Gemma3ForConditionalGeneration(cfg), _with_labels(
        ids, pixel_values=torch.randn(2, 3, 64, 64), token_type_ids=(ids == IMAGE).long())


def qwen2_vl():
    cfg = tf.Qwen2VLConfig(vision_config=dict(GRID, embed_dim=64, mlp_ratio=2),
                           text_config=dict(TEXT, model_type="qwen2_vl_text", rope_scaling=dict(type="mrope", mrope_section=[2, 2, 4])),
                           image_token_id=IMAGE, vision_start_token_id=START)  # fmt: skip
    ids = _ids(16)
    ids[:, 0] = START
    return tf.Qwen2VLForConditionalGeneration(cfg), _grid_inputs(ids)


def qwen2_5_vl():  # windowed attention in its vision tower
    cfg = tf.Qwen2_5_VLConfig(vision_config=dict(GRID, window_size=16, fullatt_block_indexes=[1]),
                              text_config=dict(TEXT, model_type="qwen2_5_vl_text", rope_scaling=dict(type="mrope", mrope_section=[2, 2, 4])),
                              image_token_id=IMAGE, vision_start_token_id=START)  # fmt: skip
    ids = _ids(16)
    ids[:, 0] = START
    return tf.Qwen2_5_VLForConditionalGeneration(cfg), _grid_inputs(ids)


def qwen3_vl():  # deepstack: vision features added into early text layers
    cfg = tf.Qwen3VLConfig(vision_config=dict(GRID, num_position_embeddings=64, deepstack_visual_indexes=[0]),
                           text_config=dict(TEXT, head_dim=16, rope_parameters=dict(MROPE, mrope_interleaved=True)),
                           image_token_id=IMAGE, vision_start_token_id=START)  # fmt: skip
    ids = _ids(16)
    ids[:, 0] = START
    return tf.Qwen3VLForConditionalGeneration(cfg), _grid_inputs(ids)


def idefics2():  # a perceiver resampler of 8 latents an image
    cfg = tf.Idefics2Config(vision_config=dict(VISION),
                            perceiver_config=dict(hidden_size=64, resampler_n_latents=8, resampler_depth=1, resampler_n_heads=4,
                                                  resampler_head_dim=16, num_key_value_heads=2),
                            text_config=dict(TEXT, model_type="mistral"), image_token_id=IMAGE)  # fmt: skip
    return tf.Idefics2ForConditionalGeneration(cfg), _with_labels(_ids(8), pixel_values=torch.randn(2, 1, 3, 64, 64))


def idefics3():  # pixel shuffle of the patches' features
    cfg = tf.Idefics3Config(vision_config=dict(VISION), text_config=dict(TEXT, model_type="llama"), image_token_id=IMAGE,
                            scale_factor=2)  # fmt: skip
    return tf.Idefics3ForConditionalGeneration(cfg), _with_labels(_ids(16), pixel_values=torch.randn(2, 1, 3, 64, 64))


def internvl():
    cfg = tf.InternVLConfig(vision_config=dict(VISION), text_config=dict(TEXT, model_type="qwen2"), image_token_id=IMAGE,
                            downsample_ratio=0.5)  # fmt: skip
    return tf.InternVLForConditionalGeneration(cfg), _with_labels(_ids(16), pixel_values=torch.randn(2, 3, 64, 64))


def mistral3():  # Pixtral's vision tower (2D rotary positions), patches merged 2x2
    cfg = tf.Mistral3Config(vision_config=dict(VISION, model_type="pixtral", head_dim=16),
                            text_config=dict(TEXT, model_type="mistral", head_dim=16), image_token_index=IMAGE,
                            spatial_merge_size=2)  # fmt: skip
    return tf.Mistral3ForConditionalGeneration(cfg), _with_labels(
        _ids(16), pixel_values=torch.randn(2, 3, 64, 64), image_sizes=torch.tensor([[64, 64]] * 2))


def mllama():  # cross-attention layers over two tiles of a 32x32 image
    cfg = tf.MllamaConfig(vision_config=dict(hidden_size=64, num_hidden_layers=2, num_global_layers=1, num_attention_heads=4,
                                             intermediate_size=128, image_size=32, patch_size=8, max_num_tiles=2,
                                             intermediate_layers_indices=[0], vision_output_dim=128,
                                             supported_aspect_ratios=[[1, 1], [1, 2]]),
                          text_config=dict(TEXT, cross_attention_layers=[1], pad_token_id=0), image_token_index=IMAGE)  # fmt: skip
    return tf.MllamaForConditionalGeneration(cfg), _with_labels(
        _ids(1), pixel_values=torch.randn(2, 1, 2, 3, 32, 32), aspect_ratio_ids=torch.tensor([[2], [2]]),
        aspect_ratio_mask=torch.ones(2, 1, 2, dtype=torch.long), cross_attention_mask=torch.ones(2, 96, 1, 2, dtype=torch.long))


def blip2():  # a Q-Former of 8 queries between the towers, an OPT decoder
    cfg = tf.Blip2Config(vision_config=VISION,
                         qformer_config=dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=128, encoder_hidden_size=64),
                         text_config=dict(TEXT, model_type="opt", ffn_dim=128, word_embed_proj_dim=64), num_query_tokens=8,
                         image_token_index=IMAGE)  # fmt: skip
    return tf.Blip2ForConditionalGeneration(cfg), _with_labels(_ids(8, total=40), pixel_values=torch.randn(2, 3, 64, 64))


def blip():  # captioning: a text decoder cross-attending to the image
    cfg = tf.BlipConfig(vision_config=VISION, projection_dim=32,
                        text_config=dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, encoder_hidden_size=64, max_position_embeddings=128))  # fmt: skip
    return tf.BlipForConditionalGeneration(cfg), _with_labels(torch.randint(3, 900, (2, 32)), pixel_values=torch.randn(2, 3, 64, 64))


def git():
    cfg = tf.GitConfig(vision_config=VISION, vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=128)  # fmt: skip
    return tf.GitForCausalLM(cfg), _with_labels(torch.randint(3, 900, (2, 32)), pixel_values=torch.randn(2, 3, 64, 64))


def kosmos2():  # the image's place given as a mask with the batch
    cfg = tf.Kosmos2Config(text_config=dict(vocab_size=1000, embed_dim=64, layers=2, attention_heads=4, ffn_dim=128,
                                            max_position_embeddings=128),
                           vision_config=VISION, latent_query_num=8)  # fmt: skip
    where = torch.zeros(2, 40, dtype=torch.bool)
    where[:, 2:10] = True
    return tf.Kosmos2ForConditionalGeneration(cfg), _with_labels(
        torch.randint(3, 900, (2, 40)), pixel_values=torch.randn(2, 3, 64, 64), image_embeds_position_mask=where)


def chameleon():  # a VQ tokenizer turns the image into 256 tokens of the text's vocabulary
    cfg = tf.ChameleonConfig(**TEXT, vq_config=dict(embed_dim=16, num_embeddings=64, base_channels=32, channel_multiplier=[1, 2],
                                                    num_res_blocks=1, resolution=32, in_channels=3, latent_channels=16,
                                                    attn_resolutions=[]),
                             vocabulary_map={f"IMGIMG{i}Z": 900 + i for i in range(64)} | {"<image>": IMAGE},
                             image_token_id=IMAGE)  # fmt: skip
    return tf.ChameleonForConditionalGeneration(cfg), _with_labels(_ids(256, total=300), pixel_values=torch.randn(2, 3, 32, 32))


def fuyu():  # image patches projected straight into the decoder's embeddings
    cfg = tf.FuyuConfig(text_config=dict(TEXT, model_type="persimmon"), patch_size=8, image_token_id=IMAGE)
    where = torch.full((2, 96), -1)
    where[:, 1:17] = torch.arange(16)
    return tf.FuyuForCausalLM(cfg), _with_labels(_ids(16), image_patches=torch.randn(2, 16, 3 * 64), image_patches_indices=where)


def pix2struct():  # variable-resolution patches with their row and column, a T5-style decoder
    cfg = tf.Pix2StructConfig(text_config=dict(vocab_size=1000, hidden_size=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
                              vision_config=dict(hidden_size=64, d_kv=16, d_ff=128, num_hidden_layers=2, num_attention_heads=4,
                                                 patch_embed_hidden_size=48, seq_len=64))  # fmt: skip
    patches = torch.randn(2, 64, 2 + 48)
    patches[:, :, 0], patches[:, :, 1] = torch.arange(64) // 8 + 1, torch.arange(64) % 8 + 1
    labels = torch.randint(3, 900, (2, 16))
    return tf.Pix2StructForConditionalGeneration(cfg), dict(flattened_patches=patches, attention_mask=torch.ones(2, 64),
                                                             labels=labels, decoder_input_ids=labels)  # fmt: skip


def clip():  # the contrastive loss over 4 image-text pairs
    cfg = tf.CLIPConfig(vision_config=VISION, text_config=dict(TEXT, max_position_embeddings=96), projection_dim=32)
    return tf.CLIPModel(cfg), dict(input_ids=torch.randint(3, 900, (4, 32)), pixel_values=torch.randn(4, 3, 64, 64), return_loss=True)


def siglip():  # the sigmoid loss over 4 image-text pairs
    cfg = tf.SiglipConfig(vision_config=VISION, text_config=dict(TEXT, max_position_embeddings=96))
    return tf.SiglipModel(cfg), dict(input_ids=torch.randint(3, 900, (4, 32)), pixel_values=torch.randn(4, 3, 64, 64), return_loss=True)


def _seeded(build: Callable) -> Callable:
    def seeded():
        torch.manual_seed(0)
        return build()

    seeded.__doc__ = build.__doc__
    return seeded


MULTIMODAL = {f"{f.__name__}_vlm": _seeded(f) for f in (
    llava, llava_next, paligemma, gemma3, qwen2_vl, qwen2_5_vl, qwen3_vl, idefics2, idefics3, internvl, mistral3, mllama,
    blip2, blip, git, kosmos2, chameleon, fuyu, pix2struct, clip, siglip)}  # fmt: skip
#: the keys the zoo drops for an inference step (pix2struct's decoder keeps its input ids)
TRAINING_ONLY = ("labels", "return_loss")
