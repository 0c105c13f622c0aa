"""HFM: path-decoupled hyperbolic flow matching (against FMA, its Euclidean counterpart).

Paper: arXiv 2602.20479 (ICML 2026).

Files
-----
algorithm.py
    HFM: path-decoupled hyperbolic flow matching (arXiv 2602.20479), and FMA (arXiv
    2510.14543).
algorithm_lorentz.py
    Lorentz (hyperboloid) model of hyperbolic space with curvature ``-c``, for HFM.
data.py
    HFM's controlled set: hierarchical "image" features with a knob for path
    entanglement.
model.py
    Velocity field of FMA / HFM: a residual MLP with AdaLN time modulation (torch
    module).
model_vlm.py
    The ``hfm_hierarchy`` vision-language model: text side of HFM's controlled set.
learner.py
    HFM / FMA client (arXiv 2602.20479, 2510.14543): a velocity field on frozen VLM
    features.

Documentation: ``docs/methods/hfm.md``; scenarios: ``scenarios/hfm/fmnist.yaml``,
``scenarios/hfm/hierarchy.yaml``, ``scenarios/hfm/local.yaml``,
``scenarios/hfm/open_clip.yaml``, ``scenarios/hfm/skimage_patches.yaml``; tests:
``tests/methods/test_hfm.py``; experiments: ``benchmarks/methods/hfm_experiment.py``.
"""
