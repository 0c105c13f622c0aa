"""IMDM: infinite-mask diffusion language model.

Paper: arXiv 2605.10518 (ICML 2026).

Files
-----
algorithm.py
    MDLM and IMDM: masked diffusion with a deterministic or an infinite-state (ε)
    mask.
algorithm_distill.py
    SDTT / IM-SDTT few-step distillation of a masked diffusion model, and the
    training loop.
algorithm_redi.py
    IMReDi (rectification on reproducible seeds) and how much a denoiser's output
    depends on ε.
data.py
    ``synthetic_align``: IMDM's synthetic task, one uniformly random token repeated
    L times.
model.py
    IMDM denoiser parameters, builder and the MDLM text pre-training artefact
    ``imdm_mdlm``.
model_denoiser.py
    Bidirectional transformer denoiser for masked diffusion (MDLM) with IMDM's
    ε-mask MLP.
learner.py
    Learner ``imdm``: masked diffusion (MDLM / IMDM) denoiser, ELBO, one-step or
    SDTT training.
strategy.py
    ``imdm_fedavg_distill``: FedAvg of an IMDM/MDLM denoiser, then server-side SDTT
    on a proxy set.

Documentation: ``docs/methods/imdm.md``; scenarios:
``scenarios/imdm/fed_sdtt_text.yaml``, ``scenarios/imdm/fedavg_server_sdtt.yaml``,
``scenarios/imdm/fedavg_text.yaml``, ``scenarios/imdm/synthetic_local.yaml``; tests:
``tests/methods/test_imdm.py``; experiments: ``benchmarks/methods/imdm_experiment.py``,
``benchmarks/methods/imdm_long.py``, ``benchmarks/methods/imdm_speed.py``.
"""
