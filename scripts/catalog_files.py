"""The files of the catalog: each released file's name, ComfyUI models/ folder and the parts it holds.

A part is (key prefix inside the file, architecture in catalog_archs.ARCHS, dtype recipe). A checkpoint
lists its sections under the prefixes ComfyUI's CheckpointSave writes (supported_models*.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# --- dtype recipes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    base: str  # safetensors dtype code of everything not quantised
    fp8: bool = False  # Linear weights in F8_E4M3
    scaled: bool = False  # ComfyUI scaled fp8: + scale_weight per Linear, + scaled_fp8 marker
    # comfy-kitchen quantised Linear weights (0.33): "int8" (I8 + an F32 scale per output row, the
    # int8/ConvRot files) or "nvfp4" (two 4-bit values per U8 + an F8_E4M3 scale per 16 + an F32 scale)
    quant: str = ""
    # Embedding tables quantised like the Linear weights (0.33's mixed-precision ops.Embedding loads fp8
    # and int8 tables): the 2026 Gemma 4 releases, whose per-layer embeddings are most of the model
    embed: bool = False


FP32, FP16, BF16 = Recipe("F32"), Recipe("F16"), Recipe("BF16")
FP8, FP8_SCALED = Recipe("BF16", fp8=True), Recipe("BF16", fp8=True, scaled=True)
FP8_FP16_SCALED = Recipe("F16", fp8=True, scaled=True)
INT8, NVFP4 = Recipe("BF16", quant="int8"), Recipe("BF16", quant="nvfp4")
INT8_EMBED = Recipe("BF16", quant="int8", embed=True)
FP8_SCALED_EMBED = Recipe("BF16", fp8=True, scaled=True, embed=True)

# --- the files -------------------------------------------------------------------------------------
# (file name, ComfyUI models/ folder, [(key prefix inside the file, architecture, recipe)]). A checkpoint
# lists its sections under the prefixes ComfyUI's CheckpointSave writes (supported_models*.py).

Part = tuple[str, str, Recipe]
DM, TE, CK = "diffusion_models", "text_encoders", "checkpoints"


def single(arch: str, recipe: Recipe) -> list[Part]:
    return [("", arch, recipe)]


def flux_checkpoint(arch: str) -> list[Part]:
    return [
        ("model.diffusion_model.", arch, FP8),
        ("text_encoders.clip_l.transformer.", "clip_l", FP16),
        ("text_encoders.t5xxl.transformer.", "t5xxl", FP8),
        ("vae.", "vae_flux", BF16),
    ]


def sdxl_checkpoint(recipe: Recipe, vae_recipe: Recipe) -> list[Part]:
    return [
        ("model.diffusion_model.", "sdxl_unet", recipe),
        ("conditioner.embedders.0.transformer.", "clip_l", recipe),
        ("conditioner.embedders.1.model.", "clip_g", recipe),
        ("first_stage_model.", "vae_sd", vae_recipe),
    ]


def sd15_checkpoint(recipe: Recipe) -> list[Part]:
    return [
        ("model.diffusion_model.", "sd15_unet", recipe),
        ("cond_stage_model.transformer.", "clip_l", recipe),
        ("first_stage_model.", "vae_sd", recipe),
    ]


FILES: list[tuple[str, str, list[Part]]] = [
    # Flux family (Black Forest Labs releases and Comfy-Org repackages)
    ("flux1-dev.safetensors", DM, single("flux_dev", BF16)),
    ("flux1-dev-fp8.safetensors", DM, single("flux_dev", Recipe("BF16", fp8=True))),
    ("flux1-dev-fp8.safetensors", CK, flux_checkpoint("flux_dev")),
    ("flux1-schnell.safetensors", DM, single("flux_schnell", BF16)),
    ("flux1-schnell-fp8.safetensors", DM, single("flux_schnell", FP8)),
    ("flux1-schnell-fp8.safetensors", CK, flux_checkpoint("flux_schnell")),
    ("flux1-kontext-dev.safetensors", DM, single("flux_dev", BF16)),
    ("flux1-dev-kontext_fp8_scaled.safetensors", DM, single("flux_dev", FP8_SCALED)),
    ("flux1-krea-dev.safetensors", DM, single("flux_dev", BF16)),
    ("flux1-krea-dev_fp8_scaled.safetensors", DM, single("flux_dev", FP8_SCALED)),
    ("flux1-fill-dev.safetensors", DM, single("flux_fill", BF16)),
    ("flux1-canny-dev.safetensors", DM, single("flux_canny", BF16)),
    ("flux1-depth-dev.safetensors", DM, single("flux_canny", BF16)),
    ("Chroma1-HD.safetensors", DM, single("chroma", BF16)),
    ("Chroma1-Base.safetensors", DM, single("chroma", BF16)),
    # Wan 2.1 / 2.2 (Comfy-Org/Wan_2.1_ComfyUI_repackaged, Wan_2.2_ComfyUI_Repackaged)
    ("wan2.1_t2v_1.3B_fp16.safetensors", DM, single("wan21_t2v_1.3b", FP16)),
    ("wan2.1_t2v_1.3B_bf16.safetensors", DM, single("wan21_t2v_1.3b", BF16)),
    ("wan2.1_t2v_14B_fp16.safetensors", DM, single("wan21_t2v_14b", FP16)),
    ("wan2.1_t2v_14B_bf16.safetensors", DM, single("wan21_t2v_14b", BF16)),
    ("wan2.1_t2v_14B_fp8_e4m3fn.safetensors", DM, single("wan21_t2v_14b", FP8)),
    ("wan2.1_t2v_14B_fp8_scaled.safetensors", DM, single("wan21_t2v_14b", FP8_SCALED)),
    *[
        (f"wan2.1_i2v_{res}_14B_{dt}.safetensors", DM, single("wan21_i2v_14b", recipe))
        for res in ("480p", "720p")
        for dt, recipe in (("fp16", FP16), ("bf16", BF16), ("fp8_e4m3fn", FP8), ("fp8_scaled", FP8_SCALED))
    ],
    ("wan2.1_flf2v_720p_14B_fp16.safetensors", DM, single("wan21_flf2v_14b", FP16)),
    # ChronoEdit-14B: a fine-tune of Wan2.1-I2V-14B-720P, same layers (nvidia/ChronoEdit-14B-Diffusers)
    ("chrono_edit_14B_fp16.safetensors", DM, single("wan21_i2v_14b", FP16)),
    ("wan2.1_flf2v_720p_14B_fp8_e4m3fn.safetensors", DM, single("wan21_flf2v_14b", FP8)),
    ("wan2.1_vace_14B_fp16.safetensors", DM, single("wan21_vace_14b", FP16)),
    ("wan2.1_vace_1.3B_fp16.safetensors", DM, single("wan21_vace_1.3b", FP16)),
    ("wan2.1_fun_control_1.3B_bf16.safetensors", DM, single("wan21_fun_control_1.3b", BF16)),
    ("wan2.1_fun_inp_1.3B_bf16.safetensors", DM, single("wan21_fun_inp_1.3b", BF16)),
    ("wan2.2_ti2v_5B_fp16.safetensors", DM, single("wan22_ti2v_5b", FP16)),
    ("wan2.2_fun_control_5B_bf16.safetensors", DM, single("wan22_fun_5b", BF16)),
    ("wan2.2_fun_inpaint_5B_bf16.safetensors", DM, single("wan22_fun_5b", BF16)),
    ("wan2.1_fun_camera_v1.1_14B_bf16.safetensors", DM, single("wan21_camera_14b", BF16)),
    ("wan2.1_fun_camera_v1.1_1.3B_bf16.safetensors", DM, single("wan21_camera_1.3b", BF16)),
    *[
        (f"wan2.2_{task}_{noise}_noise_14B_{dt}.safetensors", DM, single(arch, recipe))
        for task, arch in (("t2v", "wan21_t2v_14b"), ("i2v", "wan22_i2v_14b"))
        for noise in ("high", "low")
        for dt, recipe in (("fp16", FP16), ("fp8_scaled", FP8_SCALED))
    ],
    *[
        (
            f"wan2.2_fun_inpaint_{noise}_noise_14B_fp8_scaled.safetensors",
            DM,
            single("wan22_i2v_14b", FP8_SCALED),
        )
        for noise in ("high", "low")
    ],
    # Qwen-Image (Comfy-Org/Qwen-Image_ComfyUI): the edit releases share the 20B architecture
    *[
        (f"{name}_{dt}.safetensors", DM, single("qwen_image", recipe))
        for name in (
            "qwen_image",
            "qwen_image_edit",
            "qwen_image_edit_2509",
            "qwen_image_2512",
            "qwen_image_edit_2511",
        )
        for dt, recipe in (("fp8_e4m3fn", FP8), ("bf16", BF16))
    ],
    # HunyuanVideo, HiDream, LTXV, Lumina 2, OmniGen2, SD3.5, SDXL, SD1.5
    ("hunyuan_video_t2v_720p_bf16.safetensors", DM, single("hunyuan_video_t2v", BF16)),
    ("hunyuan_video_image_to_video_720p_bf16.safetensors", DM, single("hunyuan_video_i2v", BF16)),
    ("hidream_i1_full_fp16.safetensors", DM, single("hidream_i1", FP16)),
    ("hidream_i1_full_fp8.safetensors", DM, single("hidream_i1", FP8)),
    ("hidream_i1_dev_fp8.safetensors", DM, single("hidream_i1", FP8)),
    ("hidream_i1_fast_fp8.safetensors", DM, single("hidream_i1", FP8)),
    ("hidream_i1_dev_bf16.safetensors", DM, single("hidream_i1", BF16)),
    ("hidream_i1_fast_bf16.safetensors", DM, single("hidream_i1", BF16)),
    ("hidream_e1_full_bf16.safetensors", DM, single("hidream_i1", BF16)),
    ("hidream_e1_1_bf16.safetensors", DM, single("hidream_i1", BF16)),
    (
        "ltx-video-2b-v0.9.safetensors",
        CK,
        [("model.diffusion_model.", "ltxv_2b", FP32), ("vae.", "vae_ltxv0", FP32)],  # released in fp32
    ),
    (
        "ltx-video-2b-v0.9.5.safetensors",
        CK,
        [("model.diffusion_model.", "ltxv_2b", BF16), ("vae.", "vae_ltxv2", BF16)],
    ),
    ("lumina_2_model_bf16.safetensors", DM, single("lumina2", BF16)),
    (
        "lumina_2.safetensors",
        CK,
        [
            ("model.diffusion_model.", "lumina2", BF16),
            ("text_encoders.gemma2_2b.transformer.", "gemma2_2b", BF16),
            ("vae.", "vae_flux", BF16),
        ],
    ),
    (
        "NetaYumev35_pretrained_all_in_one.safetensors",
        CK,
        [
            ("model.diffusion_model.", "lumina2", BF16),
            ("text_encoders.gemma2_2b.transformer.", "gemma2_2b", BF16),
            ("vae.", "vae_flux", BF16),
        ],
    ),
    ("omnigen2_fp16.safetensors", DM, single("omnigen2", FP16)),
    ("sd3.5_large.safetensors", CK, [("model.diffusion_model.", "sd35_large", BF16)]),
    (
        "sd3.5_large_fp8_scaled.safetensors",
        CK,
        [
            ("model.diffusion_model.", "sd35_large", FP8_FP16_SCALED),
            ("text_encoders.clip_l.transformer.", "clip_l", FP16),
            ("text_encoders.clip_g.transformer.", "clip_g", FP16),
            ("text_encoders.t5xxl.transformer.", "t5xxl", FP8_FP16_SCALED),
            ("first_stage_model.", "vae_flux", FP16),
        ],
    ),
    ("sd_xl_base_1.0.safetensors", CK, sdxl_checkpoint(FP16, FP16)),
    ("sd_xl_turbo_1.0_fp16.safetensors", CK, sdxl_checkpoint(FP16, FP16)),
    (
        "sd_xl_refiner_1.0.safetensors",
        CK,
        [
            ("model.diffusion_model.", "sdxl_refiner_unet", FP16),
            ("conditioner.embedders.0.model.", "clip_g", FP16),
            ("first_stage_model.", "vae_sd", FP16),
        ],
    ),
    ("v1-5-pruned-emaonly.safetensors", CK, sd15_checkpoint(FP32)),
    ("v1-5-pruned-emaonly-fp16.safetensors", CK, sd15_checkpoint(FP16)),
    # text encoders (comfyanonymous/flux_text_encoders, Comfy-Org repackages)
    ("clip_l.safetensors", TE, single("clip_l", FP16)),
    ("clip_g.safetensors", TE, single("clip_g", FP16)),
    ("clip_l_hidream.safetensors", TE, single("clip_l_long", FP16)),
    ("clip_g_hidream.safetensors", TE, single("clip_g_long", FP16)),
    ("t5xxl_fp16.safetensors", TE, single("t5xxl+embed_tokens", FP16)),
    ("t5xxl_fp8_e4m3fn.safetensors", TE, single("t5xxl+embed_tokens", Recipe("F16", fp8=True))),
    ("t5xxl_fp8_e4m3fn_scaled.safetensors", TE, single("t5xxl+embed_tokens", FP8_FP16_SCALED)),
    ("umt5_xxl_fp16.safetensors", TE, single("umt5xxl", FP16)),
    ("umt5_xxl_fp8_e4m3fn_scaled.safetensors", TE, single("umt5xxl", FP8_FP16_SCALED)),
    ("t5-base.safetensors", TE, single("t5_base", FP16)),
    ("byt5_small_glyphxl_fp16.safetensors", TE, single("byt5_small_glyph", FP16)),
    ("qwen_2.5_vl_7b.safetensors", TE, single("qwen25_vl_7b+lm_head", BF16)),
    ("qwen_2.5_vl_7b_fp8_scaled.safetensors", TE, single("qwen25_vl_7b+lm_head", FP8_SCALED)),
    ("qwen_2.5_vl_fp16.safetensors", TE, single("qwen25_vl_3b", FP16)),
    ("llava_llama3_fp16.safetensors", TE, single("llava_llama3_8b+lm_head", FP16)),
    ("llava_llama3_fp8_scaled.safetensors", TE, single("llava_llama3_8b+lm_head", FP8_FP16_SCALED)),
    ("llama_3.1_8b_instruct_fp8_scaled.safetensors", TE, single("llama3_8b+lm_head", FP8_SCALED)),
    ("gemma_2_2b_fp16.safetensors", TE, single("gemma2_2b", FP16)),
    # VAEs
    ("ae.safetensors", "vae", single("vae_flux", FP32)),
    ("wan_2.1_vae.safetensors", "vae", single("vae_wan21", BF16)),
    ("Wan2_1_VAE_bf16.safetensors", "vae", single("vae_wan21", BF16)),
    ("wan2.2_vae.safetensors", "vae", single("vae_wan22", FP16)),
    ("qwen_image_vae.safetensors", "vae", single("vae_wan21", BF16)),
    ("hunyuan_video_vae_bf16.safetensors", "vae", single("vae_hunyuan_video", BF16)),
    ("vae-ft-mse-840000-ema-pruned.safetensors", "vae", single("vae_sd", FP32)),
    ("sdxl_vae.safetensors", "vae", single("vae_sd", FP32)),
    # vision encoders, upscalers
    ("clip_vision_h.safetensors", "clip_vision", single("clip_vision_h", FP16)),
    ("clip_vision_g.safetensors", "clip_vision", single("clip_vision_g", FP16)),
    ("clip_vision_l.safetensors", "clip_vision", single("clip_vision_l", FP16)),
    ("sigclip_vision_patch14_384.safetensors", "clip_vision", single("siglip_384", FP16)),
    # --- the 2026 families (built with ComfyUI 0.33's classes) ---
    # Flux.2 (black-forest-labs FLUX.2-dev / FLUX.2-klein; Comfy-Org repackages)
    ("flux-2-klein-4b.safetensors", DM, single("flux2_klein_4b", BF16)),
    ("flux-2-klein-base-4b.safetensors", DM, single("flux2_klein_4b", BF16)),
    ("flux-2-klein-4b-fp8.safetensors", DM, single("flux2_klein_4b", FP8)),
    ("flux-2-klein-base-4b-fp8.safetensors", DM, single("flux2_klein_4b", FP8)),
    ("flux-2-klein-9b.safetensors", DM, single("flux2_klein_9b", BF16)),
    ("flux-2-klein-base-9b.safetensors", DM, single("flux2_klein_9b", BF16)),
    ("flux-2-klein-9b-fp8.safetensors", DM, single("flux2_klein_9b", FP8)),
    ("flux-2-klein-base-9b-fp8.safetensors", DM, single("flux2_klein_9b", FP8)),
    ("flux-2-klein-9b-kv-fp8.safetensors", DM, single("flux2_klein_9b", FP8)),
    # fp8mixed: ComfyUI keeps some Linear layers in bf16 (which ones is not published): fp8 counted
    ("flux2_dev_fp8mixed.safetensors", DM, single("flux2_dev", FP8)),
    ("flux2_dev_bf16.safetensors", DM, single("flux2_dev", BF16)),
    # HunyuanVideo 1.5 (8.3B), Z-Image (6B), HuMo (Wan 2.1 14B + audio), Wan 2.2 Animate
    *[
        (f"hunyuanvideo1.5_{task}_fp16.safetensors", DM, single("hunyuan_video_15", FP16))
        for task in ("720p_t2v", "720p_i2v", "480p_t2v", "480p_i2v", "1080p_sr_distilled")
    ],
    *[
        (f"z_image{v}_{dt}.safetensors", DM, single("z_image", recipe))
        for v in ("", "_turbo")
        for dt, recipe in (("bf16", BF16), ("int8_convrot", INT8))
    ],
    ("humo_17B_fp8_e4m3fn.safetensors", DM, single("wan21_humo_14b", FP8)),
    ("humo_17B_fp16.safetensors", DM, single("wan21_humo_14b", FP16)),
    ("Wan2_1-HuMo-17B_fp8_e4m3fn.safetensors", DM, single("wan21_humo_14b", FP8)),
    ("wan2.2_animate_14B_bf16.safetensors", DM, single("wan22_animate_14b", BF16)),
    ("wan_animate_2_int8_convrot.safetensors", DM, single("wan_animate2_14b", INT8)),
    ("wan_animate_2_distill_int8_convrot.safetensors", DM, single("wan_animate2_14b", INT8)),
    ("Wan2_2-Animate-14B_fp8_e4m3fn_scaled_KJ.safetensors", DM, single("wan22_animate_14b", FP8_SCALED)),
    ("kandinsky5lite_t2i.safetensors", DM, single("kandinsky5_image_lite", BF16)),
    # Qwen-Image Edit 2509/2511 in comfy-kitchen int8 (the 20B Qwen-Image layers), Chroma in fp8
    *[
        (f"qwen_image_edit_{v}_int8_convrot.safetensors", DM, single("qwen_image", INT8))
        for v in ("2509", "2511")
    ],
    ("Chroma1-HD-fp8mixed.safetensors", DM, single("chroma", FP8)),
    ("hunyuanvideo15_vae_fp16.safetensors", "vae", single("vae_hunyuan_video15", FP16)),
    # HiDream-O1 (pixel space, no VAE): checkpoints holding the model alone
    ("hidream_o1_image_bf16.safetensors", CK, [("model.diffusion_model.", "hidream_o1", BF16)]),
    *[
        (
            f"hidream_o1_image{v}_fp8_scaled.safetensors",
            CK,
            [("model.diffusion_model.", "hidream_o1", FP8_SCALED)],
        )
        for v in ("", "_dev")
    ],
    # Capybara v0.1 (xgen-universe, released in Comfy-Org's HunyuanVideo 1.5 repackage): 1.5's layers
    ("capybara_v0.1.safetensors", DM, single("hunyuan_video_15", FP16)),
    # Causal Forcing (frame-wise), released in the Wan 2.1 repackage: Wan 2.1 T2V 1.3B in fp32
    ("causal_forcing-framewise.safetensors", DM, single("wan21_t2v_1.3b", FP32)),
    # RT-DETR v4 (a detector the 0.33 host loads through UNETLoader)
    ("rt_detr_v4-x-hgnet_fp16.safetensors", DM, single("rt_detr_v4", FP16)),
    ("rt_detr_v4-x-hgnet_fp32.safetensors", DM, single("rt_detr_v4", FP32)),
    # Wan-Alpha's two VAEs: Wan 2.1 VAEs (one decodes RGB, one alpha)
    ("wan_alpha_2.1_vae_rgb_channel.safetensors", "vae", single("vae_wan21", BF16)),
    ("wan_alpha_2.1_vae_alpha_channel.safetensors", "vae", single("vae_wan21", BF16)),
    # text encoders: Qwen3-VL (Qwen-Image 2.1, Krea 2, MiniMax H3), Qwen3 (Flux.2 Klein, Z-Image)
    ("qwen3vl_4b_bf16.safetensors", TE, single("qwen3vl_4b", BF16)),
    ("qwen3vl_4b_fp8_scaled.safetensors", TE, single("qwen3vl_4b", FP8_SCALED)),
    ("qwen3vl_4b_int8_convrot.safetensors", TE, single("qwen3vl_4b", INT8)),
    ("qwen3vl_8b_bf16.safetensors", TE, single("qwen3vl_8b", BF16)),
    ("qwen3vl_8b_fp8_scaled.safetensors", TE, single("qwen3vl_8b", FP8_SCALED)),
    ("qwen3vl_8b_int8_convrot.safetensors", TE, single("qwen3vl_8b", INT8)),
    ("qwen3vl_32b_bf16.safetensors", TE, single("qwen3vl_32b", BF16)),
    ("qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors", TE, single("qwen3vl_32b", NVFP4)),
    ("qwen_3_4b.safetensors", TE, single("qwen3_4b", BF16)),
    ("qwen_3_8b_fp8mixed.safetensors", TE, single("qwen3_8b", FP8)),
    ("mistral_3_small_flux2_bf16.safetensors", TE, single("mistral3_small_24b_pruned", BF16)),
    ("mistral_3_small_flux2_fp8.safetensors", TE, single("mistral3_small_24b_pruned", FP8)),
    ("gemma_3_12B_it.safetensors", TE, single("gemma3_12b", BF16)),
    ("gemma_3_12B_it_fp8_scaled.safetensors", TE, single("gemma3_12b", FP8_SCALED)),
    # --- the 2026 families of #26, built with 0.33's classes at their default (released) dims ---
    ("krea2_turbo_fp8_scaled.safetensors", DM, single("krea2", FP8_SCALED)),
    ("krea2_turbo_int8_convrot.safetensors", DM, single("krea2", INT8)),
    # MiniMax H3: the curve-form DiT ("pruned": no full-width adaln); its two VAEs; Music 3's DiT
    *[
        (name, DM, single("minimax_h3_curve", INT8))
        for name in (
            "minimax_h3_fl2va_pruned_int8_convrot.safetensors",
            "minimax_h3_ref2va_pruned_int8_convrot.safetensors",
            "fastvideo_fasth3_8step_v2_pruned_int8_convrot.safetensors",
            "fasth3_omniref_8step_pruned_int8_convrot.safetensors",
        )
    ],
    ("minimax_h3_video_vae_int8_convrot.safetensors", "vae", single("vae_minimax_h3_video", INT8)),
    ("minimax_h3_video_vae_fp16.safetensors", "vae", single("vae_minimax_h3_video", FP16)),
    ("minimax_h3_audio_vae_fp32.safetensors", "vae", single("vae_minimax_h3_audio", FP32)),
    ("minimax_music3_dit_fp16.safetensors", DM, single("minimax_music3", FP16)),
    # ACE-Step 1.5 (2B turbo/base DiT; its 48 kHz Oobleck VAE), Stable Audio Open 1.0 (a checkpoint:
    # DiT + T5-base + Oobleck VAE, all fp32; listed under ComfyUI's canonical section prefixes)
    ("acestep_v1.5_turbo.safetensors", DM, single("ace_step15", BF16)),
    ("ace_1.5_vae.safetensors", "vae", single("vae_oobleck_48k", FP16)),
    # the all-in-one checkpoint: the 2B DiT, both Qwen3 encoders of ACE15's text encoder (0.6B embedder,
    # 1.7B lyrics LM: supported_models.ACEStep15.clip_target) and the 48 kHz VAE
    (
        "ace_step_1.5_turbo_aio.safetensors",
        CK,
        [
            ("model.diffusion_model.", "ace_step15", BF16),
            ("text_encoders.qwen3_06b.transformer.", "qwen3_06b_ace15", BF16),
            ("text_encoders.qwen3_2b.transformer.", "qwen3_2b_ace15_lm", BF16),
            ("vae.", "vae_oobleck_48k", FP16),
        ],
    ),
    (
        "stable-audio-open-1.0.safetensors",
        CK,
        [
            ("model.diffusion_model.", "stable_audio_open_dit", FP32),
            ("text_encoders.t5base.transformer.", "t5_base", FP32),
            ("first_stage_model.", "vae_oobleck", FP32),
        ],
    ),
    # image DiTs of the 0.33 README whose class defaults are the release's
    *[
        (f"ideogram4{v}_{dt}.safetensors", DM, single("ideogram4", recipe))
        for v in ("", "_unconditional")
        for dt, recipe in (("fp8_scaled", FP8_SCALED), ("int8_convrot", INT8))
    ],
    ("ernie-image.safetensors", DM, single("ernie_image", BF16)),
    ("ernie-image-turbo.safetensors", DM, single("ernie_image", BF16)),
    ("lens_bf16.safetensors", DM, single("lens", BF16)),
    ("lens_turbo_bf16.safetensors", DM, single("lens", BF16)),
    *[
        (f"mage_flow{v}_int8_convrot.safetensors", DM, single("mage_flow", INT8))
        for v in ("", "_turbo", "_edit", "_edit_turbo")
    ],
    ("boogu_image_edit_fp8_scaled.safetensors", DM, single("boogu", FP8_SCALED)),
    ("boogu_image_turbo_fp8_scaled.safetensors", DM, single("boogu", FP8_SCALED)),
    ("boogu_image_edit_int8_convrot.safetensors", DM, single("boogu", INT8)),
    ("pixeldit_1300m_1024px_bf16.safetensors", DM, single("pixeldit_t2i", BF16)),
    ("triposplat_fp16.safetensors", DM, single("triposplat", FP16)),
    ("pid_flux1_1024_to_4096_4step_bf16.safetensors", DM, single("pid_flux1", BF16)),
    ("qwen_image_layered_bf16.safetensors", DM, single("qwen_image_layered", BF16)),
    ("qwen_image_layered_control_bf16.safetensors", DM, single("qwen_image_layered", BF16)),
    # text encoders: Gemma 4 and the Gemma 2 ELM fp8 release quantise their embedding tables too (0.33's
    # ops.Embedding loads fp8 and rotated int8 tables; in bf16 Gemma 4 E4B's per-layer embeddings alone,
    # 2.8B parameters, would be 5.3 GiB of a file stated at 8.44), Qwen3 of ACE-Step 1.5, Gemma 3 4B,
    # Ministral 3 3B (text only: the host has no vision tower for it)
    ("gemma4_e4b_it_fp8_scaled.safetensors", TE, single("gemma4_e4b", FP8_SCALED_EMBED)),
    ("gemma4_e2b_it_int8_convrot.safetensors", TE, single("gemma4_e2b", INT8_EMBED)),
    ("qwen_0.6b_ace15.safetensors", TE, single("qwen3_06b_ace15", BF16)),
    ("qwen_1.7b_ace15.safetensors", TE, single("qwen3_2b_ace15_lm", BF16)),
    ("qwen_4b_ace15.safetensors", TE, single("qwen3_4b_ace15_lm", BF16)),
    ("qwen_3_06b_base.safetensors", TE, single("qwen3_06b", BF16)),
    ("qwen_3_4b_fp8_mixed.safetensors", TE, single("qwen3_4b", FP8)),
    ("gemma_3_4b_it_bf16.safetensors", TE, single("gemma3_4b", BF16)),
    ("gemma_2_2b_it_elm_bf16.safetensors", TE, single("gemma2_2b", BF16)),
    ("gemma_2_2b_it_elm_fp8_scaled.safetensors", TE, single("gemma2_2b", FP8_SCALED_EMBED)),
    ("ministral-3-3b.safetensors", TE, single("ministral3_3b", BF16)),
    # Wan 14B variants (the model type is what the file's keys tell the host; named here by the file)
    *[
        (
            f"wan2.2_fun_camera_{n}_noise_14B_fp8_scaled.safetensors",
            DM,
            single("wan22_camera_14b", FP8_SCALED),
        )
        for n in ("high", "low")
    ],
    *[
        (
            f"wan2.2_fun_control_{n}_noise_14B_fp8_scaled.safetensors",
            DM,
            single("wan22_fun_control_14b", FP8_SCALED),
        )
        for n in ("high", "low")
    ],
    ("wan2.2_s2v_14B_fp8_scaled.safetensors", DM, single("wan22_s2v_14b", FP8_SCALED)),
    ("wan2.1_14B_SCAIL_2_fp16.safetensors", DM, single("wan21_scail2_14b", FP16)),
    ("wan2.1_14B_SCAIL_2_int8_convrot.safetensors", DM, single("wan21_scail2_14b", INT8)),
    *[
        (f"wan2.2_dancer_14b_{v}_fp8_scaled.safetensors", DM, single("wan22_dancer_14b", FP8_SCALED))
        for v in ("global", "local")
    ],
    # Wan 2.1 I2V 14B fine-tunes and Kijai's fp8 repackages (same layers as the I2V 14B)
    ("Wan21-WanMove_fp8_scaled_e4m3fn_KJ.safetensors", DM, single("wan21_i2v_14b", FP8_SCALED)),
    ("Wan2_1-I2V-14B-480p_fp8_e4m3fn_scaled_KJ.safetensors", DM, single("wan21_i2v_14b", FP8_SCALED)),
    ("Wan2_1-I2V-ATI-14B_fp8_e4m3fn.safetensors", DM, single("wan21_i2v_14b", FP8)),
    # Qwen3.5 (the int8 ConvRot prompt enhancers of Qwen-Image 2.1 quantise their embedding tables too)
    ("qwen3.5_2b_bf16.safetensors", TE, single("qwen35_2b", BF16)),
    ("qwen3.5_4b_bf16.safetensors", TE, single("qwen35_4b", BF16)),
    *[
        (f"qwen3.5_9b_qwen_image_2.1_pe_{v}.int8_convrot.safetensors", TE, single("qwen35_9b", INT8_EMBED))
        for v in ("t2i", "i2i")
    ],
    ("jina_clip_v2_bf16.safetensors", TE, single("jina_clip_v2", BF16)),
    ("t5gemma_b_b_ul2.safetensors", TE, single("t5gemma_b", BF16)),
    ("flux2-vae.safetensors", "vae", single("vae_flux2", FP32)),
    # Qwen-Image Layered's VAE: the Wan 2.1 VAE layout (RGBA in and out: the first and last convs only)
    ("qwen_image_layered_vae.safetensors", "vae", single("vae_wan21", BF16)),
    ("chroma-radiance-x0.safetensors", DM, single("chroma_radiance", BF16)),
    ("seedvr2_3b_int8_convrot.safetensors", DM, single("seedvr2_3b", INT8)),
    ("seedvr2_7b_int8_convrot.safetensors", DM, single("seedvr2_7b", INT8)),
    ("flux.1-fill-dev-OneReward-transformer_fp8.safetensors", DM, single("flux_fill", FP8)),
    ("qwen3vl_8b_joyimage_edit_int8_convrot.safetensors", TE, single("qwen3vl_8b", INT8)),
    *[
        (f"kandinsky5lite_{v}.safetensors", DM, single("kandinsky5_video_lite", BF16))
        for v in ("t2v_sft_5s", "i2v_5s", "t2v_5s", "t2v_10s")
    ],
    ("RealESRGAN_x4plus.safetensors", "upscale_models", single("esrgan_x4", FP32)),
    ("RealESRGAN_x4plus.pth", "upscale_models", single("esrgan_x4", FP32)),
    ("4x-UltraSharp.pth", "upscale_models", single("esrgan_x4", FP32)),
]

# LoRAs whose rank is in their name: (file, base architecture, rank, recipe[, the block list's prefix])
LORAS: list[tuple] = [
    # LTX-2's distilled LoRA, rank 384 (its name) on the 19B audio-video DiT's transformer blocks
    ("ltx-2-19b-distilled-lora-384.safetensors", "ltxav_19b", 384, BF16, "transformer_blocks."),
    ("lightx2v_I2V_14B_480p_cfg_step_distill_rank64_bf16.safetensors", "wan21_i2v_14b", 64, BF16),
    ("lightx2v_T2V_14B_cfg_step_distill_v2_lora_rank64_bf16.safetensors", "wan21_t2v_14b", 64, BF16),
    ("Wan21_CausVid_14B_T2V_lora_rank32.safetensors", "wan21_t2v_14b", 32, BF16),
    ("Wan21_CausVid_bidirect2_T2V_1_3B_lora_rank32.safetensors", "wan21_t2v_1.3b", 32, BF16),
]

# Files no host class here sizes exactly, whose family is known for that exact file (the catalog entry
# is the fact the plan has without the file; the header decides once the file is there):
# file name -> (family, why). Their size is the one their template's note states.
FAMILY_FACTS: dict[str, tuple[str, str]] = {
    "svd_xt.safetensors": ("svd", "Stable Video Diffusion XT (the host's SVD_img2vid)"),
    "svd.safetensors": ("svd", "Stable Video Diffusion (the host's SVD_img2vid)"),
    **{
        name: ("minimax_h3", "MiniMax H3 DiT, pruned (the host's MiniMaxH3)")
        for name in (
            "minimax_h3_fl2va_pruned_int8_convrot.safetensors",
            "minimax_h3_ref2va_pruned_int8_convrot.safetensors",
            "fastvideo_fasth3_8step_v2_pruned_int8_convrot.safetensors",
            "fasth3_omniref_8step_pruned_int8_convrot.safetensors",
        )
    },
    **{
        f"kandinsky5lite_{v}.safetensors": ("kandinsky5", "Kandinsky 5.0 Video Lite (the host's Kandinsky5)")
        for v in ("t2v_sft_5s", "i2v_5s", "t2v_5s", "t2v_10s")
    },
    **{
        f"ltx-2-19b-{v}.safetensors": ("ltxv", "LTX-2 19B audio-video checkpoint (the host's LTXAV)")
        for v in ("dev", "distilled", "dev-fp8", "distilled-fp8")
    },
    **{
        f"ltx-2.3-22b-{v}.safetensors": ("ltxv", "LTX-2.3 22B audio-video checkpoint (the host's LTXAV)")
        for v in ("dev", "distilled", "dev-fp8", "distilled-fp8")
    },
}

# Built files whose size differs from the one their template's note states by more than 10%, and why
# (scripts/check_model_catalog.py prints these next to the file; the size the plan uses stays the built
# one, since a note can be wrong and a class cannot hide a tensor).
SIZE_REMARKS: dict[str, str] = {
    "t5-base.safetensors": (
        "the note states 0.83 GiB, which is T5-base with its decoder and in fp32 (223M x 4 B); ComfyUI"
        " loads the encoder only (110M) and the file the template links is the full fp32 model, so the"
        " note describes the download, not what the host keeps: ours is the encoder in fp16"
    ),
    "qwen_3_4b_fp8_mixed.safetensors": (
        "fp8mixed: ComfyUI keeps some Linear layers in bf16 and which ones is not published; all fp8"
        " (ours) is the lower bound, 7.49 GiB (bf16) the upper; the note's 5.25 GiB lies between"
    ),
    "gemma4_e4b_it_fp8_scaled.safetensors": (
        "bounded by the class: 7.46 GiB with every Linear and Embedding table in fp8 (ours), 10.71 GiB with"
        " the tables in bf16; the note's 8.44 GiB lies between (some tables kept in bf16: which is not"
        " published)"
    ),
    "qwen3vl_8b_fp8_scaled.safetensors": (
        "the host's Qwen3-VL 8B in fp8 with the vision tower; the note's 9.86 GiB matches a file that"
        " keeps more layers in bf16 than ComfyUI's scaled-fp8 recipe (which ones is not published)"
    ),
    "t5gemma_b_b_ul2.safetensors": (
        "T5Gemma b-b is an encoder-decoder (about 0.6B parameters, 1.1 GiB in bf16, the note's size);"
        " the host's T5GemmaModel (Stable Audio 3's text encoder) builds and loads the encoder only"
    ),
    **{
        f"kandinsky5lite_{v}.safetensors": (
            "the released Kandinsky 5 Video Lite files hold 12% more than the host's class at the dims"
            " comfy/model_detection.py reads for them (2.0B parameters, 32 x 1792); what the rest is"
            " (EMA copies, an extra head) cannot be told without the file's header"
        )
        for v in ("t2v_sft_5s", "i2v_5s")
    },
    "ministral-3-3b.safetensors": (
        "the released file carries Ministral 3's vision encoder (about 0.4B parameters, 0.8 GiB in bf16),"
        " which the host's text encoder class does not build or load"
    ),
}

# Families of the templates' files that still take their note's size (source "stated"), and why no
# class build sizes them here (scripts/check_model_catalog.py prints this in bench/results/catalog.md).
NOT_BUILT: dict[str, str] = {
    "Qwen-Image 2.1 (qwen_image_2.1_*, its VAE)": (
        "newer than ComfyUI 0.33 (no class, no model_detection branch); no published config was found"
        " in the research notes or by search. The research notes give 7B parameters: the note's 6.76 GiB"
        " for the int8 files (7.26e9 B) fits 7B x 1 B plus scales, a plausibility check, not a build"
    ),
    "LTX-2 / LTX-2.3 checkpoints (ltx-2-19b-*, ltx-2.3-22b-*)": (
        "the DiT is built (19B, activations measured) but the checkpoint's audio VAE is configured from"
        " the file's metadata (lightricks/vae/audio_vae.py AudioVAE(metadata)), and 2.3's 22B dims are"
        " read from the file's keys"
    ),
    "ACE-Step 1.5 XL, Stable Audio 3, Anima, LongCat-Image": (
        "0.33 reads their widths and block counts from the file's keys; the class defaults are another"
        " size (ACE-Step 1.5's are the 2B turbo) and no config for these releases is in the host"
    ),
    "Hunyuan3D 2.x checkpoints": (
        "the checkpoint also holds its shape VAE and image conditioner, whose configs 0.33 reads from"
        " the file; not built this round"
    ),
    "LoRAs, ControlNets and model patches without the rank or base in the name": (
        "a LoRA's size is rank x the base's Linear shapes: the rank is in the header, not the name"
    ),
    "the other 2026 image/3-D/audio models (FireRed, NewBie, Void, Moss, Ming, Ovis-Image, Trellis 2,"
    " Pixal3D, YuE 2, SAM 3.x, MiniMax Music 3's text encoder, GPT-OSS nvfp4, w4a8 files, their VAEs)": (
        "not attempted this round: a config from the file's keys, a quantisation format (w4a8, nvfp4"
        " experts) the recipes do not model, or no class in 0.33"
    ),
}
