"""Exceptions: one class per HTTP status a caller handles, each carrying the problem+json body."""


class TrainyardError(Exception):
    """Anything this package raises on purpose (not a transport error of requests)."""


class ConfigError(TrainyardError):
    """No server or token, or a config file that cannot be used (e.g. readable by others)."""


class APIError(TrainyardError):
    """The server answered with an error (RFC 9457 problem+json).

    status, title, detail, code (e.g. "job-not-found"), type (a URN), errors (a list of
    {"path": "$.workers.count", "message": ...} field errors, possibly empty) and problem (the
    whole document; {} when the body was not problem+json)."""

    def __init__(self, status, problem, request_id=None):
        problem = problem if isinstance(problem, dict) else {}
        self.status = status
        self.problem = problem
        self.title = problem.get("title", "")
        self.detail = problem.get("detail", "")
        self.code = problem.get("code", "")
        self.type = problem.get("type", "")
        self.errors = list(problem.get("errors", []))
        self.request_id = request_id
        message = f"{status} {self.title}".rstrip()
        if self.detail:
            message += f": {self.detail}"
        for e in self.errors[:5]:
            message += f"\n  {e.get('path')}: {e.get('message')}"
        super().__init__(message)


class BadRequest(APIError):
    """400: a malformed request (a bad query parameter, a body that is not JSON)."""


class Unauthorized(APIError):
    """401: no token, or one the server does not know (revoked, mistyped)."""


class Forbidden(APIError):
    """403: the token lacks the scope the operation needs."""


class NotFound(APIError):
    """404: no such resource for this token (another team's job is not found either)."""


class Conflict(APIError):
    """409: e.g. cancelling a finished job (code job-finished, problem["state"]), a name taken."""


class Invalid(APIError):
    """422: the body was read but is not valid; errors names every bad field."""


class _Retryable(APIError):
    """An answer with Retry-After: retry_after is its seconds (None when absent)."""

    def __init__(self, status, problem, request_id=None, retry_after=None):
        super().__init__(status, problem, request_id)
        self.retry_after = retry_after


class TooManyRequests(_Retryable):
    """429: too many followed streams (code too-many-streams), or a rate limit."""


class ServiceUnavailable(_Retryable):
    """503: the server is starting, stopping or overloaded."""


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
              422: Invalid, 429: TooManyRequests, 503: ServiceUnavailable}


def error_from_response(response):
    """The APIError subclass for a requests.Response with an error status."""
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    cls = _BY_STATUS.get(response.status_code, APIError)
    request_id = response.headers.get("X-Request-Id")
    if issubclass(cls, _Retryable):
        try:
            retry_after = int(response.headers["Retry-After"])
        except (KeyError, ValueError):
            retry_after = None
        return cls(response.status_code, problem, request_id, retry_after)
    return cls(response.status_code, problem, request_id)
