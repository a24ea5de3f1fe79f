"""The host programs' shared parts: data generated in code, models, and evaluation.

`cnn` (MNIST-style digits), `lm` (a WikiText-style word-level LSTM language model), `rl` (an
actor-critic agent on a cart-pole simulated in code), and the larger models `resnet`, `vit`, `gpt2`
and `llama` (`vision`, `decoders`). A case's own file holds its training function, where its bug is.
The realistic programs hold their models and loops themselves and take only data from here:
`glyphs` (a handwriting-like image dataset) and `stories` (English-like text written as corpus files).
"""
