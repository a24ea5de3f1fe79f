"""The host programs' shared parts: data generated in code, models, and evaluation.

`cnn` (MNIST-style digits), `lm` (a WikiText-style word-level LSTM language model), `rl` (an
actor-critic agent on a cart-pole written in code), and the larger models `resnet`, `vit`, `gpt2`
and `llama`. A case's own file holds its training function, where its bug is.
"""
