"""Networks and pretrained parts: MLPs, transformers, encoders, vision-language models."""
