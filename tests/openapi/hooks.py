"""schemathesis hooks of tests/openapi/run.sh: they steer generated requests towards the parts
of the service that random values never reach, without hiding the ones they do reach."""

import itertools

import schemathesis

_SEQUENCE = itertools.count()
# Ids of the responses this run created, to continue and to address.
_CREATED: list[str] = []
# Paused responses not answered yet: their id and the call ids they wait for.
_PAUSED: list[tuple[str, list[str]]] = []
# Conversations this run created, and the ids of items added to each.
_CONVERSATIONS: list[str] = []
_ITEMS: dict[str, list[str]] = {}


@schemathesis.hook
def before_call(context, case, kwargs):
    """Gives each `Idempotency-Key` a suffix of its own, and every other generated response
    id (`previous_response_id`, the `{id}` of a path) the id of a response that exists.

    The service answers a key used before with another body with a 400 (as it should), and
    hypothesis draws the same few short keys again and again: without the suffix nearly every
    create after the first few with the header would be that 400. A key that is invalid stays
    invalid (unless only its length was), so the header's checks are still exercised. Random
    ids are all unknown (400 or 404); half of them stay so.
    """
    n = next(_SEQUENCE)
    headers = case.headers
    if headers and "Idempotency-Key" in headers:
        headers["Idempotency-Key"] = f"{headers['Idempotency-Key']}.{n}"
    if n % 2:
        return
    body = case.body
    if case.operation.path.startswith("/v1/conversations/"):
        # The conversation endpoints address a conversation (and an item of it) of this run.
        if _CONVERSATIONS and case.path_parameters:
            conversation = _CONVERSATIONS[n % len(_CONVERSATIONS)]
            case.path_parameters["id"] = conversation
            items = _ITEMS.get(conversation)
            if "item_id" in case.path_parameters and items:
                case.path_parameters["item_id"] = items[n % len(items)]
        return
    if case.operation.path.endswith("/submit_tool_outputs") and _PAUSED and isinstance(body, dict):
        response_id, calls = _PAUSED.pop()
        case.path_parameters["id"] = response_id
        outputs = body.get("tool_outputs")
        outputs = outputs if isinstance(outputs, list) and outputs else [{"output": "done"}]
        body["tool_outputs"] = [
            {**(entry if isinstance(entry, dict) else {}), "tool_call_id": call}
            for entry, call in zip(itertools.cycle(outputs), calls)
        ]
        body.pop("tool_approvals", None)
        return
    if not _CREATED:
        return
    known = _CREATED[n % len(_CREATED)]
    if case.path_parameters and "id" in case.path_parameters:
        case.path_parameters["id"] = known
    if isinstance(body, dict) and isinstance(body.get("previous_response_id"), str):
        body["previous_response_id"] = known


@schemathesis.hook
def after_call(context, case, response):
    """Remembers the id of every response created, and the calls a paused one waits for
    (from answers as JSON)."""
    operation = case.operation
    if response.status_code != 200:
        return
    if operation.path == "/v1/conversations/{id}/items":
        # Items added, or listed: ids to address one item by.
        try:
            page = response.json()
        except ValueError:
            return
        added = [item.get("id") for item in page.get("data", []) if isinstance(item, dict)]
        known = _ITEMS.setdefault(case.path_parameters["id"], [])
        known.extend(i for i in added if isinstance(i, str) and i not in known)
        return
    if operation.method.upper() != "POST":
        return
    try:
        body = response.json()
    except ValueError:
        return
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        return
    if operation.path == "/v1/responses":
        _CREATED.append(body["id"])
    if operation.path == "/v1/conversations":
        _CONVERSATIONS.append(body["id"])
    action = body.get("required_action")
    if isinstance(action, dict):
        pending = action.get("submit_tool_outputs", {})
        calls = [call["id"] for call in pending.get("tool_calls", [])]
        if calls and not pending.get("approval_requests"):
            _PAUSED.append((body["id"], calls))
