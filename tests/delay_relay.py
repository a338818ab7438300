"""A TCP relay that delays everything it forwards, each way: WAN latency in userspace, for
kernels without sch_netem (this machine's VM kernel is built without it).

    python3 delay_relay.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

Each chunk read from one side is written to the other DELAY_MS after it arrived, in order, so
a request/response exchange costs 2 * DELAY_MS more, like netem's delay on both ends of a link.
"""

import asyncio
import sys

CHUNK = 256 * 1024


async def forward(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(CHUNK):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((loop.time() + delay, None))
    try:
        await sender
    except ConnectionError:
        pass


async def relay(target_host, target_port, delay, client_reader, client_writer):
    try:
        server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(forward(client_reader, server_writer, delay),
                         forward(server_reader, client_writer, delay))
    for writer in (server_writer, client_writer):
        writer.close()


async def main(listen, target, delay_ms):
    listen_host, listen_port = listen.rsplit(":", 1)
    target_host, target_port = target.rsplit(":", 1)
    delay = delay_ms / 1000
    server = await asyncio.start_server(
        lambda r, w: relay(target_host, int(target_port), delay, r, w), listen_host, int(listen_port))
    print(f"relaying {listen} -> {target} with {delay_ms} ms each way", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
