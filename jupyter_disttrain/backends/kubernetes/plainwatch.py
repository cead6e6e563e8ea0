"""A watch of the official client whose events carry plain JSON and that ends when stopped."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import watch


def plain_watch() -> watch.Watch:
    """A watch whose events carry the objects as the JSON dicts the server sent.

    The client's own watch builds a model object per event (a pod's is hundreds of
    objects, each making a client ``Configuration``): with a thousand pods starting,
    that was most of a following kernel's CPU, only for :meth:`.Connection.plain` to
    turn it back into the dict.
    """
    return _plain_watch_class()()


@functools.cache
def _plain_watch_class() -> type[watch.Watch]:
    from kubernetes import watch

    class PlainWatch(watch.Watch):  # type: ignore[misc]
        """Also ends at once when stopped from another thread: :meth:`stop` shuts the
        response's socket down instead of waiting for the stream's next event."""

        _response: Any = None

        def unmarshal_event(self, data: str, return_type: Any) -> Any:
            return super().unmarshal_event(data, None)

        def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
            @functools.wraps(func)  # the client reads the call's docstring
            def opened(*call_args: Any, **call_kwargs: Any) -> Any:
                self._response = func(*call_args, **call_kwargs)
                return self._response

            return super().stream(opened, *args, **kwargs)  # type: ignore[no-any-return]

        def stop(self) -> None:
            super().stop()
            response = self._response
            if response is not None:
                # a read blocked in the watch's thread ends now; a response the watch has
                # closed or released meanwhile refuses (ValueError, RuntimeError, or the
                # socket's OSError) and needs nothing
                with contextlib.suppress(ValueError, RuntimeError, OSError):
                    response.shutdown()

    return PlainWatch
