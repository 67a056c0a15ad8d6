"""What share of the facts of the span a summary covers does the summary keep?

Usage: `python bench/summary_facts.py [FILE_OR_DIR ...] [--window 16000 --window 32000] [--profile long_horizon]`

Replays each run through a summarising preset with the deterministic extractive summariser
(`replay.extractive_summary_model`) and, for every summariser call, compares the execution facts
(file paths and error lines, as `replay` defines them) of what the summariser was given (the
transcript of the covered span and the previous summary) with those in its answer. The stub keeps
what fits in the size the prompt asks for, newest first; the prompt asks a real model to keep
every path and error line, which only a run against that model can measure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelResponse, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import TiktokenCounter, profile
from pydantic_ai_context.replay import error_lines, extractive_summary_model, load_histories, paths_in, replay

DEFAULT_DIR = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'trajectories'


def facts(text: str) -> set[str]:
    return set(paths_in(text)) | set(error_lines(text))


class Recording:
    """The extractive summariser, recording the share of the given facts each answer keeps."""

    def __init__(self) -> None:
        self.stub = extractive_summary_model()
        self.shares: list[float] = []
        self.model = FunctionModel(self._answer, model_name='extractive-summariser')

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        response = await self.stub.request(messages, None, _parameters())
        prompt = '\n'.join(
            p.content
            for m in messages
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        given = facts(prompt)
        if given:
            answer = ''.join(getattr(p, 'content', '') for p in response.parts)
            self.shares.append(sum(1 for f in given if f in answer) / len(given))
        return response


def _parameters() -> object:
    from pydantic_ai.models import ModelRequestParameters

    return ModelRequestParameters()


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('paths', nargs='*')
    parser.add_argument('--window', type=int, action='append')
    parser.add_argument('--profile', default='long_horizon')
    args = parser.parse_args(argv)
    counter = TiktokenCounter()
    print(f'{"run":48} {"window":>7} {"calls":>6} {"kept (mean)":>12} {"kept (min)":>11}')
    everything: list[float] = []
    for raw in args.paths or [str(DEFAULT_DIR)]:
        path = Path(raw)
        for file in sorted(path.glob('*.json')) if path.is_dir() else [path]:
            for log in load_histories(file):
                for window in args.window or [16_000, 32_000]:
                    recording = Recording()
                    p = profile(
                        args.profile, context_window=window, counter=counter, summary_model=recording.model
                    )
                    await replay(log, p, context_window=window, counter=counter)
                    shares = recording.shares
                    everything += shares
                    if shares:
                        print(
                            f'{file.stem[:48]:48} {window:>7} {len(shares):>6} '
                            f'{statistics.fmean(shares):>12.1%} {min(shares):>11.1%}'
                        )
    if everything:
        print(
            f'{"all calls":48} {"":>7} {len(everything):>6} {statistics.fmean(everything):>12.1%} {min(everything):>11.1%}'
        )
    return 0


if __name__ == '__main__':
    sys.exit(asyncio.run(main()))
