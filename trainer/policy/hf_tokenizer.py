"""A `transformers` tokenizer behind the policy tokenizer interface.

Prompts are left-padded by the sampler, so the tokenizer's own padding side does not matter to
it; it is set to "left" anyway for callers that batch with it. EOS and PAD come from the tokenizer;
one without a pad token gets one added explicitly by the loader (`trainer.policy.hf`), never EOS
reused silently. With `PromptFormat.chat_template` a prompt is rendered as a user message (after an
optional system message) through the tokenizer's chat template, ready for the assistant's reply.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainer.policy.base import PromptFormat


def chat_observation(tok, text: str) -> str:
    """What `tok`'s chat template puts between an assistant message and the next one when `text`
    is a user message between them, found by rendering a probe conversation with and without it."""
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    opened = tok.apply_chat_template(probe[:1], tokenize=False, add_generation_prompt=True) + "a"
    closed = tok.apply_chat_template(probe, tokenize=False)
    answered = tok.apply_chat_template(
        [*probe, {"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    if not (closed.startswith(opened) and answered.startswith(closed)):
        raise ValueError("the chat template does not render a conversation as the sum of its messages")
    return closed[len(opened) :] + answered[len(closed) :]


class HFTokenizer:
    """Text to ids and back for a `transformers` policy."""

    def __init__(self, tok, fmt: PromptFormat | None = None) -> None:
        if tok.pad_token_id is None or tok.eos_token_id is None:
            raise ValueError(
                "the tokenizer needs an EOS and a PAD token (the loader adds a PAD where none is set)"
            )
        fmt = fmt or PromptFormat()
        if fmt.chat_template and not getattr(tok, "chat_template", None):
            raise ValueError("task.chat_template: true, but the model's tokenizer has no chat template")
        tok.padding_side = "left"
        self.tok, self.fmt = tok, fmt
        self.pad_id, self.eos_id = int(tok.pad_token_id), int(tok.eos_token_id)
        self.vocab_size = len(tok)

    def encode_prompt(self, prompt: str) -> list[int]:
        if not self.fmt.chat_template:
            return list(self.tok(prompt, add_special_tokens=True)["input_ids"])
        messages = [{"role": "system", "content": self.fmt.system}] if self.fmt.system else []
        messages.append({"role": "user", "content": prompt})
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def encode_pair(self, prompt: str, target: str) -> tuple[list[int], list[bool]]:
        """Prompt ids, then the target's ids and EOS; the loss mask covers the target and the EOS."""
        prompt_ids = self.encode_prompt(prompt)
        target_ids = [*self.tok(target, add_special_tokens=False)["input_ids"], self.eos_id]
        return prompt_ids + target_ids, [False] * len(prompt_ids) + [True] * len(target_ids)

    def encode_text(self, text: str) -> list[int]:
        """Ids of text that goes into a sequence as it is."""
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def encode_observation(self, text: str) -> list[int]:
        """An environment's answer after the policy's turn: with a chat template, the end of the
        assistant's message, the answer as a user message, and the start of the next assistant
        message (what the template renders between them); else the text as it is."""
        if not self.fmt.chat_template:
            return self.encode_text(text)
        return self.encode_text(chat_observation(self.tok, text))

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> str:
        """Text of `ids` without special tokens; with `stop_at_eos`, up to the first EOS."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if stop_at_eos and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tok.decode(ids, skip_special_tokens=True)

    def batch_decode(self, rows, stop_at_eos: bool = True) -> list[str]:
        return [self.decode(r, stop_at_eos=stop_at_eos) for r in rows]
