"""Tools: schema from signature and docstring, argument validation, and invocation."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey
from agentnb.tools import InvalidToolArguments, Tool, ToolContext, ask_user, tool

KEY = SessionKey("ns", "alice", "agent", "s1")


class Address(BaseModel):
    street: str
    city: str = "Berlin"


class Opaque:
    """A type pydantic has no schema for."""


class Reading(BaseModel):
    sensor: str
    value: float


def make_ctx(
    records: list[tuple[str, Any, bool]] | None = None, progress: list[Any] | None = None
) -> ToolContext:
    """A ToolContext whose callbacks append to the given lists."""
    recs = records if records is not None else []
    prog = progress if progress is not None else []
    return ToolContext(
        KEY,
        "turn_1",
        "run_1",
        "call_1",
        lambda t, d, r: recs.append((t, d, r)),
        prog.append,
    )


def invoke(t: Tool, arguments: dict[str, Any], ctx: ToolContext | None = None) -> str:
    return asyncio.run(t.invoke(arguments, ctx or make_ctx()))


@tool
def create_order(
    item: str,
    qty: int = 1,
    mode: Literal["standard", "express"] = "standard",
    tags: list[str] | None = None,
    address: Address | None = None,
    *,
    note: str = "",
) -> str:
    """Create an order for an item.

    The order is placed at once.

    Args:
        item: The catalogue name of the item,
            exactly as listed.
        qty (int): How many to order.
        mode: Shipping speed.
    """
    return f"{qty} x {item} ({mode})"


class TestDecorator:
    def test_bare_decorator_makes_a_tool(self) -> None:
        """@tool without arguments returns a Tool named after the function."""
        assert isinstance(create_order, Tool)
        assert create_order.name == "create_order"
        assert not create_order.idempotent
        assert not create_order.confirm
        assert not create_order.external

    def test_decorator_with_flags(self) -> None:
        """@tool(...) passes the flags, name and description through."""

        @tool(idempotent=True, name="quote", description="Get a quote.")
        def fetch_quote(vendor: str) -> str:
            """Ignored docstring."""
            return vendor

        assert (fetch_quote.name, fetch_quote.description) == ("quote", "Get a quote.")
        assert fetch_quote.idempotent

    def test_confirm_and_external_flags(self) -> None:
        """confirm and external each set their own flag."""

        @tool(confirm=True)
        def a(x: int) -> int:
            return x

        @tool(external=True)
        def b(x: int) -> int:
            return x

        assert a.confirm
        assert not a.external
        assert b.external
        assert not b.confirm

    def test_calling_the_tool_calls_the_function(self) -> None:
        """A Tool is callable like the function it wraps, for unit tests."""
        assert create_order("pen", qty=2) == "2 x pen (standard)"

    def test_plain_functions_are_accepted_directly(self) -> None:
        """tool(fn) works without decorator syntax."""

        def lookup(plan: str) -> str:
            return plan

        assert tool(lookup).name == "lookup"


class TestSchema:
    def test_spec_has_openai_function_shape(self) -> None:
        """spec() returns exactly name, description and parameters."""
        spec = create_order.spec()
        assert set(spec) == {"name", "description", "parameters"}
        assert spec["parameters"]["type"] == "object"

    def test_description_is_the_first_docstring_paragraph(self) -> None:
        """The description is the docstring's first paragraph only."""
        assert create_order.description == "Create an order for an item."

    def test_args_section_describes_parameters(self) -> None:
        """Google-style Args entries, including continuation lines, become descriptions."""
        props = create_order.parameters["properties"]
        assert props["item"]["description"] == "The catalogue name of the item, exactly as listed."
        assert props["qty"]["description"] == "How many to order."
        assert "description" not in props["note"]

    def test_rich_signature_schema(self) -> None:
        """Defaults, Literal, Optional lists and nested models map to JSON schema."""
        params = create_order.parameters
        props = params["properties"]
        assert params["required"] == ["item"]
        assert props["item"]["type"] == "string"
        assert props["qty"] == {
            "default": 1,
            "description": "How many to order.",
            "type": "integer",
        }
        assert props["mode"]["enum"] == ["standard", "express"]
        assert props["mode"]["default"] == "standard"
        assert {"type": "array", "items": {"type": "string"}} in props["tags"]["anyOf"]
        assert {"$ref": "#/$defs/Address"} in props["address"]["anyOf"]
        assert params["$defs"]["Address"]["required"] == ["street"]
        assert list(props) == ["item", "qty", "mode", "tags", "address", "note"]

    def test_unknown_properties_are_refused_in_schema(self) -> None:
        """The schema forbids additional properties."""
        assert create_order.parameters["additionalProperties"] is False

    def test_generated_titles_are_dropped_but_a_parameter_named_title_stays(self) -> None:
        """Pydantic's title keywords are removed without losing a parameter called 'title'."""

        @tool
        def rename(title: str, address: Address) -> str:
            return title

        params = rename.parameters
        assert "title" not in params
        assert "title" in params["properties"]
        assert "title" not in params["properties"]["title"]
        assert "title" not in params["$defs"]["Address"]

    def test_ctx_parameter_is_not_in_the_schema(self) -> None:
        """A ToolContext parameter, by annotation or by the name ctx, is left out."""

        @tool
        def a(x: int, context: ToolContext) -> int:
            return x

        @tool
        def b(x: int, ctx: Any = None) -> int:
            return x

        assert list(a.parameters["properties"]) == ["x"]
        assert list(b.parameters["properties"]) == ["x"]

    def test_no_parameters(self) -> None:
        """A function without parameters has an empty object schema."""

        @tool
        def now() -> str:
            return "noon"

        assert now.parameters["properties"] == {}
        assert now.parameters["required"] == []

    def test_field_defaults_keep_their_constraints(self) -> None:
        """A pydantic Field used as a default keeps its bounds and description."""

        @tool
        def pick(n: int = Field(3, ge=1, description="How many.")) -> int:
            return n

        assert pick.parameters["properties"]["n"] == {
            "default": 3,
            "description": "How many.",
            "minimum": 1,
            "type": "integer",
        }

    def test_names_that_shadow_basemodel_attributes_work(self) -> None:
        """Parameters named like BaseModel attributes (json, schema, model_config) work."""

        @tool
        def odd(json: str, schema: int, model_config: bool = False) -> str:
            return f"{json}{schema}{model_config}"

        assert list(odd.parameters["properties"]) == ["json", "schema", "model_config"]
        assert invoke(odd, {"json": "j", "schema": 2}) == "j2False"

    def test_spec_is_a_copy(self) -> None:
        """Mutating a spec does not change the tool."""
        create_order.spec()["parameters"]["properties"].clear()
        assert "item" in create_order.parameters["properties"]


class TestDocstringStyles:
    def test_numpy_parameters_section_describes_parameters(self) -> None:
        """A NumPy-style Parameters section gives each parameter its (folded) description."""

        @tool
        def order(item: str, qty: int = 1) -> str:
            """Create an order.

            Parameters
            ----------
            item : str
                The catalogue name,
                exactly as listed.
            qty : int, optional
                How many to order.

            Returns
            -------
            str
                The order line.
            """
            return item

        props = order.parameters["properties"]
        assert order.description == "Create an order."
        assert props["item"]["description"] == "The catalogue name, exactly as listed."
        assert props["qty"]["description"] == "How many to order."

    def test_numpy_shared_entry_describes_each_named_parameter(self) -> None:
        """A NumPy entry naming several parameters ("x, y : int") describes each of them."""

        @tool
        def span(x: int, y: int) -> int:
            """Measure a span.

            Parameters
            ----------
            x, y : int
                The two ends.
            """
            return y - x

        props = span.parameters["properties"]
        assert props["x"]["description"] == props["y"]["description"] == "The two ends."

    def test_sphinx_params_describe_parameters(self) -> None:
        """Sphinx-style :param: fields, typed or not, give parameter descriptions."""

        @tool
        def order(item: str, qty: int = 1) -> str:
            """Create an order.

            :param item: The catalogue name,
                exactly as listed.
            :param int qty: How many to order.
            :returns: the order line
            """
            return item

        props = order.parameters["properties"]
        assert order.description == "Create an order."
        assert props["item"]["description"] == "The catalogue name, exactly as listed."
        assert props["qty"]["description"] == "How many to order."

    def test_summary_without_blank_line_stops_at_the_section(self) -> None:
        """A summary directly followed by Args: is the whole first paragraph, not the section."""

        @tool
        def lookup(plan: str) -> str:
            """Look up the price
            of a plan.
            Args:
                plan: The plan name.
            """
            return plan

        assert lookup.description == "Look up the price of a plan."
        assert lookup.parameters["properties"]["plan"]["description"] == "The plan name."

    def test_unreadable_docstring_keeps_its_first_paragraph(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A docstring the parser fails on still describes the tool, without parameter texts."""

        def broken(doc: str) -> None:
            raise ValueError("cannot parse")

        monkeypatch.setattr("docstring_parser.parse", broken)

        @tool
        def lookup(plan: str) -> str:
            """Look up a plan.

            Args:
                plan: The plan name.
            """
            return plan

        assert lookup.description == "Look up a plan."
        assert "description" not in lookup.parameters["properties"]["plan"]


class TestDefinitionErrors:
    def test_confirm_and_external_together_is_refused(self) -> None:
        """confirm=True with external=True raises InvalidInput."""
        with pytest.raises(InvalidInput, match="both confirm=True and external=True"):

            @tool(confirm=True, external=True)
            def both(x: int) -> int:
                return x

    def test_confirm_and_external_together_is_refused_on_direct_construction(self) -> None:
        """Building a Tool directly with both flags raises InvalidInput too."""
        with pytest.raises(InvalidInput):
            dataclasses.replace(create_order, confirm=True, external=True)

    def test_var_args_are_refused(self) -> None:
        """*args cannot be described to the model, so it raises InvalidInput."""
        with pytest.raises(InvalidInput, match=r"'items' is \*args/\*\*kwargs"):

            @tool
            def many(*items: str) -> str:
                return ""

    def test_var_kwargs_are_refused(self) -> None:
        """**kwargs raises InvalidInput."""
        with pytest.raises(InvalidInput, match="kwargs"):

            @tool
            def many(**options: str) -> str:
                return ""

    def test_positional_only_parameters_are_refused(self) -> None:
        """Positional-only parameters raise InvalidInput naming the parameter."""
        with pytest.raises(InvalidInput, match="'x' is positional-only"):

            @tool
            def pos(x: int, /) -> int:
                return x

    def test_types_without_a_schema_are_refused(self) -> None:
        """A parameter type pydantic cannot describe raises InvalidInput."""

        def f(thing: Opaque) -> str:
            return ""

        with pytest.raises(InvalidInput, match="cannot be described"):
            tool(f)

    def test_unresolvable_annotations_are_refused(self) -> None:
        """Annotations naming a type that cannot be resolved raise InvalidInput."""

        class Local(BaseModel):
            x: int

        def f(thing: Local) -> str:  # a string annotation here: this module uses __future__
            return ""

        with pytest.raises(InvalidInput, match="cannot resolve its type annotations"):
            tool(f)

    def test_invalid_names_are_refused(self) -> None:
        """A name that the model APIs would reject raises InvalidInput."""
        with pytest.raises(InvalidInput, match="tool name"):
            tool(lambda x: x)
        with pytest.raises(InvalidInput, match="tool name"):
            tool(name="has space")(lambda x: x)

    def test_generators_are_refused(self) -> None:
        """A generator function is not a tool."""

        def gen(x: int) -> Any:
            yield x

        with pytest.raises(InvalidInput, match="generator"):
            tool(gen)


class TestValidate:
    def test_defaults_are_filled_in(self) -> None:
        """validate returns every parameter, with defaults for omitted ones."""
        assert create_order.validate({"item": "pen"}) == {
            "item": "pen",
            "qty": 1,
            "mode": "standard",
            "tags": None,
            "address": None,
            "note": "",
        }

    def test_values_are_coerced(self) -> None:
        """Lax coercion turns '3' into 3 and dicts into nested models."""
        args = create_order.validate({"item": "pen", "qty": "3", "address": {"street": "Main"}})
        assert args["qty"] == 3
        assert args["address"] == Address(street="Main")

    def test_wrong_type_names_the_argument(self) -> None:
        """A value of the wrong type names the argument, the problem and the value."""
        with pytest.raises(InvalidToolArguments) as info:
            create_order.validate({"item": "pen", "qty": "many"})
        message = str(info.value)
        assert "tool 'create_order'" in message
        assert "argument 'qty'" in message
        assert "valid integer" in message
        assert "'many'" in message

    def test_missing_argument_is_reported(self) -> None:
        """A missing required argument is named."""
        with pytest.raises(InvalidToolArguments, match="missing required argument 'item'"):
            create_order.validate({})

    def test_unknown_argument_is_reported(self) -> None:
        """An argument the function does not take is named as unknown."""
        with pytest.raises(InvalidToolArguments, match="unknown argument 'colour'"):
            create_order.validate({"item": "pen", "colour": "red"})

    def test_message_lists_expected_arguments(self) -> None:
        """The message tells the model which arguments exist."""
        with pytest.raises(InvalidToolArguments, match=r"Expected arguments: item \(required\)"):
            create_order.validate({"colour": "red"})

    def test_literal_violation_is_reported(self) -> None:
        """A value outside a Literal names the allowed values."""
        with pytest.raises(InvalidToolArguments, match="'standard' or 'express'"):
            create_order.validate({"item": "pen", "mode": "overnight"})

    def test_nested_field_errors_have_a_path(self) -> None:
        """Errors inside nested models give the dotted path."""
        with pytest.raises(InvalidToolArguments, match=r"missing required field 'address\.street'"):
            create_order.validate({"item": "pen", "address": {}})

    def test_problems_are_available_as_data(self) -> None:
        """The exception carries the tool name and one problem per error."""
        with pytest.raises(InvalidToolArguments) as info:
            create_order.validate({"qty": "x", "bogus": 1})
        assert info.value.tool_name == "create_order"
        assert len(info.value.problems) == 3

    def test_non_object_arguments_are_refused(self) -> None:
        """Arguments that are not a mapping raise InvalidToolArguments."""
        with pytest.raises(InvalidToolArguments, match="must be a JSON object, got list"):
            create_order.validate(["pen"])  # type: ignore[arg-type]

    def test_invalid_tool_arguments_is_invalid_input(self) -> None:
        """InvalidToolArguments belongs to the InvalidInput branch of the error tree."""
        assert issubclass(InvalidToolArguments, InvalidInput)


class TestInvoke:
    def test_sync_tool_runs_off_the_loop_thread(self) -> None:
        """A sync tool runs in a worker thread, not on the event loop's thread."""
        seen: dict[str, int] = {}

        @tool
        def where() -> str:
            seen["tool"] = threading.get_ident()
            return "ok"

        async def main() -> str:
            seen["loop"] = threading.get_ident()
            return await where.invoke({}, make_ctx())

        assert asyncio.run(main()) == "ok"
        assert seen["tool"] != seen["loop"]

    def test_async_tool_runs_on_the_loop(self) -> None:
        """An async tool is awaited on the loop's own thread."""
        seen: dict[str, int] = {}

        @tool
        async def where() -> str:
            seen["tool"] = threading.get_ident()
            await asyncio.sleep(0)
            return "ok"

        async def main() -> str:
            seen["loop"] = threading.get_ident()
            return await where.invoke({}, make_ctx())

        assert asyncio.run(main()) == "ok"
        assert seen["tool"] == seen["loop"]
        assert where.is_async

    def test_sync_tool_does_not_block_the_loop(self) -> None:
        """Other tasks make progress while a sync tool blocks."""
        started = threading.Event()
        release = threading.Event()

        @tool
        def slow() -> str:
            started.set()
            assert release.wait(5)
            return "done"

        async def main() -> str:
            task = asyncio.create_task(slow.invoke({}, make_ctx()))
            while not started.is_set():
                await asyncio.sleep(0.001)
            release.set()  # only reachable because the loop was free
            return await task

        assert asyncio.run(main()) == "done"

    def test_validated_arguments_are_passed(self) -> None:
        """invoke validates and coerces arguments before calling the function."""
        assert invoke(create_order, {"item": "pen", "qty": "2"}) == "2 x pen (standard)"

    def test_invalid_arguments_raise_before_the_body_runs(self) -> None:
        """invoke raises InvalidToolArguments and never calls the function."""
        calls: list[int] = []

        @tool
        def count(n: int) -> str:
            calls.append(n)
            return ""

        with pytest.raises(InvalidToolArguments):
            invoke(count, {"n": "lots"})
        assert calls == []

    def test_ctx_by_annotation_is_injected(self) -> None:
        """A parameter annotated ToolContext receives the call's context."""
        seen: list[ToolContext] = []

        @tool
        def noting(x: int, context: ToolContext) -> str:
            seen.append(context)
            return ""

        ctx = make_ctx()
        asyncio.run(noting.invoke({"x": 1}, ctx))
        assert seen == [ctx]

    def test_ctx_by_name_is_injected(self) -> None:
        """A parameter named ctx receives the call's context, even without an annotation."""

        @tool
        async def ids(ctx) -> str:  # type: ignore[no-untyped-def]
            return f"{ctx.turn_id}/{ctx.run_id}/{ctx.call_id}/{ctx.key.session_id}"

        assert invoke(ids, {}) == "turn_1/run_1/call_1/s1"

    def test_ctx_record_and_progress_reach_the_engine_callbacks(self) -> None:
        """ctx.record and ctx.progress call the injected callbacks, from the worker thread."""
        records: list[tuple[str, Any, bool]] = []
        progress: list[Any] = []

        @tool
        def review(doc: str, ctx: ToolContext) -> str:
            ctx.progress({"pct": 50})
            ctx.record("acme/review_note", {"doc": doc}, required=True)
            ctx.record("acme/seen", {"doc": doc})
            return "reviewed"

        assert invoke(review, {"doc": "a"}, make_ctx(records, progress)) == "reviewed"
        assert progress == [{"pct": 50}]
        assert records == [
            ("acme/review_note", {"doc": "a"}, True),
            ("acme/seen", {"doc": "a"}, False),
        ]

    def test_ctx_is_not_an_argument_the_model_can_pass(self) -> None:
        """An argument called ctx from the model is refused as unknown."""

        @tool
        def f(ctx: ToolContext) -> str:
            return ""

        with pytest.raises(InvalidToolArguments, match="unknown argument 'ctx'"):
            invoke(f, {"ctx": "forged"})

    def test_exceptions_propagate(self) -> None:
        """An exception from the tool body reaches the caller unchanged."""

        @tool
        def broken() -> str:
            raise KeyError("nope")

        with pytest.raises(KeyError, match="nope"):
            invoke(broken, {})

    def test_async_exceptions_propagate(self) -> None:
        """An exception from an async tool body reaches the caller unchanged."""

        @tool
        async def broken() -> str:
            raise ValueError("bad")

        with pytest.raises(ValueError, match="bad"):
            invoke(broken, {})

    def test_async_tools_are_cancellable(self) -> None:
        """Cancelling invoke cancels an async tool body at its next await."""
        state: list[str] = []

        @tool
        async def wait_long() -> str:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                state.append("cancelled")
                raise
            return ""

        async def main() -> None:
            task = asyncio.create_task(wait_long.invoke({}, make_ctx()))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert state == ["cancelled"]

    def test_cancelled_sync_tool_finishes_before_cancel_propagates(self) -> None:
        """A cancelled invoke of a sync tool returns only after the thread has finished."""
        started = threading.Event()
        finished = threading.Event()

        @tool
        def slow() -> str:
            started.set()
            threading.Event().wait(0.05)
            finished.set()
            return "done"

        async def main() -> None:
            task = asyncio.create_task(slow.invoke({}, make_ctx()))
            while not started.is_set():
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert finished.is_set()

        asyncio.run(main())

    def test_context_variables_reach_sync_tools(self) -> None:
        """Sync tools see the caller's context variables."""
        import contextvars

        var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

        @tool
        def read() -> str:
            return var.get()

        async def main() -> str:
            var.set("set")
            return await read.invoke({}, make_ctx())

        assert asyncio.run(main()) == "set"


class TestResultText:
    @pytest.mark.parametrize(
        ("value", "text"),
        [
            ("plain", "plain"),
            (None, ""),
            ({"b": 1, "a": [1, 2]}, '{"b":1,"a":[1,2]}'),
            ([1, "x", None], '[1,"x",null]'),
            ((1, 2), "[1,2]"),
            (Reading(sensor="t", value=1.5), '{"sensor":"t","value":1.5}'),
            ([Reading(sensor="t", value=2.0)], '[{"sensor":"t","value":2.0}]'),
            ({"ü": "ß"}, '{"ü":"ß"}'),
            (42, "42"),
            (1.5, "1.5"),
            (True, "True"),
        ],
    )
    def test_results_become_text(self, value: Any, text: str) -> None:
        """str as is, None as '', models/dicts/lists as compact JSON, else str()."""

        @tool
        def give() -> Any:
            return value

        assert invoke(give, {}) == text

    def test_unserialisable_values_inside_json_fall_back_to_str(self) -> None:
        """A dict holding a non-JSON object still converts, using str() for that object."""

        class Thing:
            def __str__(self) -> str:
                return "thing"

        @tool
        def give() -> Any:
            return {"x": Thing()}

        assert invoke(give, {}) == '{"x":"thing"}'


class TestAskUser:
    def test_shape(self) -> None:
        """ask_user is an external tool with interaction 'ask_user' and one string question."""
        assert ask_user.name == "ask_user"
        assert ask_user.interaction == "ask_user"
        assert ask_user.external
        assert not ask_user.confirm
        assert ask_user.parameters["properties"]["question"]["type"] == "string"
        assert ask_user.parameters["required"] == ["question"]
        assert ask_user.description

    def test_function_must_never_run(self) -> None:
        """Calling the ask_user function raises RuntimeError: a person answers it."""
        with pytest.raises(RuntimeError, match="respond"):
            ask_user(question="why?")

    def test_other_tools_have_no_interaction(self) -> None:
        """Tools made with @tool have interaction None."""
        assert create_order.interaction is None

    def test_unknown_interaction_is_refused(self) -> None:
        """Only known interaction kinds are accepted."""
        with pytest.raises(InvalidInput, match="interaction"):
            dataclasses.replace(create_order, interaction="telepathy")


class TestToolContext:
    def test_repr_hides_callbacks(self) -> None:
        """The context's repr shows ids only, not the engine's callbacks."""
        text = repr(make_ctx())
        assert "call_1" in text
        assert "lambda" not in text

    def test_context_is_frozen(self) -> None:
        """A tool cannot change its context."""
        ctx = make_ctx()
        with pytest.raises(dataclasses.FrozenInstanceError):
            ctx.turn_id = "other"  # type: ignore[misc]
