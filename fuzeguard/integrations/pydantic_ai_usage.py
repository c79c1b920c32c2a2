"""Token metering for Pydantic AI: a model wrapper that adds each response's usage to the run
(``fuzeguard.metering``).

    agent = Agent(MeteredModel("openai:gpt-4o-mini", prices=Prices({"gpt-4o-mini": (0.15, 0.60)})))

Each response's ``usage`` (``input_tokens``, ``output_tokens``) is added with its
``model_name``: a request's (``run``, ``run_sync``), and a streamed one's (``run_stream``,
``run_stream_events``, ``iter``) once its stream is over (read to its end, or left early: the
usage it reported by then).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import KnownModelName, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from fuzeguard._private.runs.run import Run
from fuzeguard.metering import Prices, add_usage


class MeteredModel(WrapperModel):
    """``wrapped`` (a model or a model name), its responses' tokens (and, with ``prices``, their
    cost) added to ``run`` (default: the current run)."""

    def __init__(self, wrapped: Model | KnownModelName, prices: Prices | None = None,
                 run: Run | None = None) -> None:
        super().__init__(wrapped)
        self.prices = prices
        self.run = run

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        response = await super().request(messages, model_settings, model_request_parameters,
                                         *args, **kwargs)
        usage = response.usage
        add_usage(int(usage.input_tokens or 0), int(usage.output_tokens or 0),
                  model=response.model_name, prices=self.prices, run=self.run)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with super().request_stream(messages, model_settings, model_request_parameters,
                                          run_context) as streamed:
            try:
                yield streamed
            finally:
                usage = streamed.usage
                add_usage(int(usage.input_tokens or 0), int(usage.output_tokens or 0),
                          model=streamed.model_name, prices=self.prices, run=self.run)


__all__ = ["MeteredModel"]
