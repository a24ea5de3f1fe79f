"""External (karpathy/nanoGPT, train.py), non-deterministic runtime error: a read of the training data fails once.

Adapted from karpathy/nanoGPT train.py (MIT License, Copyright (c) 2022 Andrej Karpathy), with
config/train_shakespeare_char.py scaled down to a CPU (2 layers, 64 wide, 64-character blocks,
150 iterations). `get_batch`, `estimate_loss`, `get_lr` and the training loop are upstream's; changed
to run here: the module-level loop is the function `train` (its module-level variables become
its locals and arguments), DDP, wandb and `torch.compile` are off as their config flags say, the
data folder is generated (`external.write_char_dataset`), `init_from='resume'` reads the
checkpoint the harness names, and the loop stops at `until` for the harness. The model is
upstream's model.py (`hosts/nanogpt_model.py`). Checkpoints are upstream's: `out_dir/ckpt.pt`
when the validation loss improves, at the evaluations (every 50 iterations).

The fault: the data folder sits on a network file system; at iteration 80 one `np.memmap` of
`train.bin` in `get_batch` fails with EIO; read again, the file is there.
"""

import os
import time
import math
import pickle
from contextlib import nullcontext

import numpy as np
import torch

import daifu
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts import external
from DLFailureBenchmark.hosts.common import retrying
from DLFailureBenchmark.hosts.nanogpt_model import GPTConfig, GPT

STEP_NAME, CHECKPOINT_NAME = "iter_num", "ckpt.pt"
FAULT_AT = 80

# -----------------------------------------------------------------------------
# config/train_shakespeare_char.py, scaled down to a CPU
out_dir = 'out-shakespeare-char'
eval_interval = 50
log_interval = 10
eval_iters = 5
eval_only = False
always_save_checkpoint = False
init_from = 'scratch'
dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 12
block_size = 64
n_layer = 2
n_head = 2
n_embd = 64
dropout = 0.0
bias = False
learning_rate = 1e-3
max_iters = 150
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
decay_lr = True
warmup_iters = 10
lr_decay_iters = 150
min_lr = 1e-4
device = 'cpu'
dtype = 'float32'
compile = False
ddp = False
master_process = True
config = {k: v for k, v in dict(globals()).items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))}
# -----------------------------------------------------------------------------
device_type = 'cuda' if 'cuda' in device else 'cpu' # for later use in torch.autocast
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
data_dir = os.path.join('data', dataset)


# poor man's data loader
def get_batch(split):
    # We recreate np.memmap every batch to avoid a memory leak, as per
    # https://stackoverflow.com/questions/45132940/numpy-memmap-memory-usage-want-to-iterate-once/61472122#61472122
    if split == 'train':
        data = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')
    else:
        data = np.memmap(os.path.join(data_dir, 'val.bin'), dtype=np.uint16, mode='r')
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
    if device_type == 'cuda':
        # pin arrays x,y, which allows us to move them to GPU asynchronously (non_blocking=True)
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


# helps estimate an arbitrarily accurate loss over either split using many batches
@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


# learning rate decay scheduler (cosine with warmup)
def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)


@daifu.transform
def train(model, optimizer, scaler, model_args, iter_num, best_val_loss, until):
    # training loop
    X, Y = get_batch('train') # fetch the very first batch
    t0 = time.time()
    local_iter_num = 0 # number of iterations in the lifetime of this process
    raw_model = model.module if ddp else model # unwrap DDP container if needed
    running_mfu = -1.0
    while True:

        # determine and set the learning rate for this iteration
        lr = get_lr(iter_num) if decay_lr else learning_rate
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

        # evaluate the loss on train/val sets and write checkpoints
        if iter_num % eval_interval == 0 and master_process:
            losses = estimate_loss(model)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses['val'] < best_val_loss or always_save_checkpoint:
                best_val_loss = losses['val']
                if iter_num > 0:
                    checkpoint = {
                        'model': raw_model.state_dict(),
                        'optimizer': optimizer.state_dict(),
                        'model_args': model_args,
                        'iter_num': iter_num,
                        'best_val_loss': best_val_loss,
                        'config': config,
                    }
                    print(f"saving checkpoint to {out_dir}")
                    torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))
        if iter_num == 0 and eval_only:
            break

        # forward backward update, with optional gradient accumulation to simulate larger batch size
        # and using the GradScaler if data type is float16
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps # scale the loss to account for gradient accumulation
            # immediately async prefetch next batch while model is doing the forward pass on the GPU
            X, Y = get_batch('train')
            # backward pass, with gradient scaling if training in fp16
            scaler.scale(loss).backward()
        # clip the gradient
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        # step the optimizer and scaler if training in fp16
        scaler.step(optimizer)
        scaler.update()
        # flush the gradients as soon as we can, no need for this memory anymore
        optimizer.zero_grad(set_to_none=True)

        # timing and logging
        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0 and master_process:
            # get loss as float. note: this is a CPU-GPU sync point
            # scale up to undo the division above, approximating the true total loss (exact would have been a sum)
            lossf = loss.item() * gradient_accumulation_steps
            if local_iter_num >= 5: # let the training loop settle a bit
                mfu = raw_model.estimate_mfu(batch_size * gradient_accumulation_steps, dt)
                running_mfu = mfu if running_mfu == -1.0 else 0.9*running_mfu + 0.1*mfu
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")
        iter_num += 1
        local_iter_num += 1

        # termination conditions
        if iter_num > max_iters:
            break
        if until is not None and iter_num >= until:
            break
    return local_iter_num


def main(workdir, seed=0, resume=None, until=None):
    global out_dir, data_dir, init_from
    out_dir = os.path.join(workdir, 'out-shakespeare-char')
    data_dir = str(external.write_char_dataset(os.path.join(workdir, 'data', dataset)))
    init_from = 'resume' if resume else 'scratch'
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(1337 + seed)

    # init these up here, can override if init_from='resume' (i.e. from a checkpoint)
    iter_num = 0
    best_val_loss = 1e9

    # attempt to derive vocab_size from the dataset
    meta_path = os.path.join(data_dir, 'meta.pkl')
    meta_vocab_size = None
    if os.path.exists(meta_path):
        with open(meta_path, 'rb') as f:
            meta = pickle.load(f)
        meta_vocab_size = meta['vocab_size']
        print(f"found vocab_size = {meta_vocab_size} (inside {meta_path})")

    # model init
    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                      bias=bias, vocab_size=None, dropout=dropout) # start with model_args from command line
    if init_from == 'scratch':
        # init a new model from scratch
        print("Initializing a new model from scratch")
        model_args['vocab_size'] = meta_vocab_size if meta_vocab_size is not None else 50304
        gptconf = GPTConfig(**model_args)
        model = GPT(gptconf)
    else:
        print(f"Resuming training from {resume}")
        checkpoint = torch.load(resume, map_location=device)
        checkpoint_model_args = checkpoint['model_args']
        for k in ['n_layer', 'n_head', 'n_embd', 'block_size', 'bias', 'vocab_size']:
            model_args[k] = checkpoint_model_args[k]
        gptconf = GPTConfig(**model_args)
        model = GPT(gptconf)
        model.load_state_dict(checkpoint['model'])
        iter_num = checkpoint['iter_num']
        best_val_loss = checkpoint['best_val_loss']
    model.to(device)

    # initialize a GradScaler. If enabled=False scaler is a no-op
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))

    # optimizer
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    if init_from == 'resume':
        optimizer.load_state_dict(checkpoint['optimizer'])
    checkpoint = None # free up memory

    # the network file system: one read of train.bin fails, at iteration 80 (from scratch)
    reads = 1 + FAULT_AT + 2 * eval_iters * (FAULT_AT // eval_interval + 1) + 1
    faults.flaky("numpy.memmap", fail_on={reads}, error=faults.io_error, caller=__file__)

    steps = train(model, optimizer, scaler, model_args, iter_num, best_val_loss, until)
    final = estimate_loss(model)
    return {"steps": steps, "train_loss": float(final['train']), "val_loss": float(final['val'])}
