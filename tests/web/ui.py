"""A browser's view of the web UI over plain HTTP (httpx): sign in with a token, read pages, send forms
with or without their CSRF token."""

from __future__ import annotations

import re
import ssl

import httpx

from tests.api.server import Server

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: str) -> str:
    found = CSRF.search(page)
    assert found, page
    return found.group(1)


class Ui:
    def __init__(self, server: Server) -> None:
        context = ssl.create_default_context(cadata=server.ca.decode())
        self.http = httpx.AsyncClient(base_url=f"{server.url}/ui", verify=context, timeout=30)
        self.csrf = ""

    async def __aenter__(self) -> Ui:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def login(self, token: str) -> httpx.Response:
        form = await self.http.get("/login")
        answer = await self.http.post("/login", data={"csrf": csrf_of(form.text), "token": token})
        if answer.status_code == 303:
            self.csrf = csrf_of((await self.http.get("/clusters")).text)
        return answer

    async def page(self, path: str) -> httpx.Response:
        return await self.http.get(path)

    async def post(self, path: str, csrf: bool = True, **fields: str) -> httpx.Response:
        data = {**fields, **({"csrf": self.csrf} if csrf else {})}
        return await self.http.post(path, data=data)
