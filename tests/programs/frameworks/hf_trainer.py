"""A tiny GPT-2 trained by Hugging Face's Trainer on generated tokens (no download), with the user's
own `compute_loss`: gradient accumulation, a linear schedule, a callback counting steps."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from digest import digest, write

VOCAB = 64


class Counting(TrainerCallback):
    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1


class LossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits
        shift_logits = logits[:, :-1, :]
        shift_labels = labels[:, 1:]
        loss = F.cross_entropy(shift_logits.reshape(-1, VOCAB), shift_labels.reshape(-1))
        return (loss, outputs) if return_outputs else loss


def main() -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=16,
                                       bos_token_id=0, eos_token_id=0))
    tokens = torch.randint(0, VOCAB, (32, 9), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row.clone()} for row in tokens]
    counting = Counting()
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder, max_steps=4, per_device_train_batch_size=4, gradient_accumulation_steps=2,
            learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=1, logging_steps=1, save_strategy="no",
            report_to=[], use_cpu=True, seed=0, disable_tqdm=True, dataloader_num_workers=0,
        )
        trainer = LossTrainer(model=model, args=args, train_dataset=data, callbacks=[counting])
        trainer.train()
    write({
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "global_step": trainer.state.global_step,
        "callback_steps": counting.steps,
        "parameters": digest(dict(model.state_dict())),
        "optimizer": digest(trainer.optimizer.state_dict()),
        "scheduler": [trainer.lr_scheduler.state_dict()["last_epoch"], trainer.lr_scheduler.get_last_lr()],
    })


if __name__ == "__main__":
    main()
