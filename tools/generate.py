"""anyshape-generate: generate with an artifact of ``anyshape-compile --task text-generation``
or ``--task text2text-generation`` (or ``Generator.save``).

Prompts are token ids (``--ids 464,2068,7586``, once per row: rows of
different lengths are left-padded) or, with ``--tokenizer DIR`` (a HF
tokenizer saved with ``save_pretrained``), text (``--prompt``, once per row).
Prints each row's tokens (ids, or text with a tokenizer), one row per line:
a causal LM's prompt and new tokens (``--new-only``: the new ones), an
encoder-decoder's new tokens (its prompt is the encoder's source).
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anyshape-generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifact", help="a generator's artifact directory")
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--ids", action="append", metavar="ID,ID,...",
                         help="a prompt's token ids, comma separated (repeat for a batch)")
    prompts.add_argument("--prompt", action="append", metavar="TEXT",
                         help="a prompt's text, with --tokenizer (repeat for a batch)")
    parser.add_argument("--tokenizer", metavar="DIR", help="a HF tokenizer directory")
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--min-new-tokens", type=int, default=None)
    parser.add_argument("--do-sample", action="store_true", help="sample (default: greedy)")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--eos-token-id", type=int, action="append", default=None,
                        help="an end token (repeat for several; default: the model's)")
    parser.add_argument("--decoder-start-token-id", type=int, default=None,
                        help="an encoder-decoder's first decoder token (default: the model's)")
    parser.add_argument("--no-repeat-ngram-size", type=int, default=None,
                        help="no n-gram of this size twice in a row's output")
    parser.add_argument("--num-beams", type=int, default=None, help="beam search with N beams")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="beam search: a finished beam's score over its length to this power")
    parser.add_argument("--early-stopping", choices=["true", "false", "never"], default=None,
                        help="beam search: when a row's search stops (HF's early_stopping)")
    parser.add_argument("--num-return-sequences", type=int, default=None,
                        help="sequences printed per prompt (the best beams, or samples), "
                             "each prompt's together")
    parser.add_argument("--prompt-lookup-num-tokens", type=int, default=None,
                        help="assisted decoding: draft up to N tokens found earlier in the row "
                             "and verify them in one step (one prompt only)")
    parser.add_argument("--seed", type=int, default=None, help="torch.manual_seed for sampling")
    parser.add_argument("--new-only", action="store_true",
                        help="print the new tokens only, not the prompt")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.prompt and not args.tokenizer:
        parser.error("--prompt needs --tokenizer DIR (or give token ids with --ids)")
    try:
        rows = [_parse_ids(text) for text in args.ids] if args.ids else None
    except ValueError as error:
        parser.error(str(error))
    import torch

    import anyshape

    try:
        generator = anyshape.load(args.artifact)
    except (OSError, ValueError) as error:
        print(f"anyshape-generate: {error}", file=sys.stderr)
        return 1
    if not isinstance(generator, anyshape.Generator):
        print(f"anyshape-generate: {args.artifact} is a compiled module, not a generator "
              f"(compile with anyshape-compile --task text-generation or "
              f"text2text-generation)", file=sys.stderr)
        return 1
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, padding_side="left")
        except (OSError, ValueError) as error:
            print(f"anyshape-generate: --tokenizer {args.tokenizer}: {error}", file=sys.stderr)
            return 1
    if rows is None:
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        encoded = tokenizer(args.prompt, return_tensors="pt", padding=True)
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
    else:
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for number, row in enumerate(rows):
            ids[number, width - len(row):] = torch.tensor(row)
            mask[number, width - len(row):] = 1
    options = {key: value for key, value in (
        ("max_new_tokens", args.max_new_tokens), ("min_new_tokens", args.min_new_tokens),
        ("temperature", args.temperature), ("top_k", args.top_k), ("top_p", args.top_p),
        ("repetition_penalty", args.repetition_penalty), ("eos_token_id", args.eos_token_id),
        ("decoder_start_token_id", args.decoder_start_token_id),
        ("no_repeat_ngram_size", args.no_repeat_ngram_size), ("num_beams", args.num_beams),
        ("length_penalty", args.length_penalty),
        ("early_stopping", {"true": True, "false": False, "never": "never", None: None}[
            args.early_stopping]),
        ("num_return_sequences", args.num_return_sequences),
        ("prompt_lookup_num_tokens", args.prompt_lookup_num_tokens),
    ) if value is not None}
    if args.do_sample:
        options["do_sample"] = True
    if args.seed is not None:
        torch.manual_seed(args.seed)
    try:
        out = generator.generate(ids, attention_mask=mask, **options)
    except (ValueError, TypeError, NotImplementedError) as error:
        print(f"anyshape-generate: {error}", file=sys.stderr)
        return 1
    from anyshape.runtime.generator import Seq2SeqGenerator

    encoder_decoder = isinstance(generator, Seq2SeqGenerator)
    returned = out.shape[0] // ids.shape[0]  # each prompt's sequences, together
    for number in range(out.shape[0]):
        row = number // returned
        if encoder_decoder:  # the decoder's tokens after its start token
            real = out[number, 1:]
        elif args.new_only:
            real = out[number, ids.shape[1]:]
        else:
            real = torch.cat([ids[row][mask[row] == 1], out[number, ids.shape[1]:]])
        if tokenizer is not None:
            print(tokenizer.decode(real, skip_special_tokens=True))
        else:
            print(",".join(str(int(t)) for t in real))
    return 0


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--ids: expected comma-separated token ids, got '{text}'") from None
    if not ids:
        raise ValueError(f"--ids: expected at least one token id, got '{text}'")
    return ids


if __name__ == "__main__":
    sys.exit(main())
