# hookbus: one image, every role (gateway, dispatcher, worker) chosen by the command.
FROM python:3.11-slim
RUN useradd --create-home --uid 10001 hookbus
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bus ./bus
COPY workers ./workers
COPY gateway ./gateway
RUN pip install --no-cache-dir .
COPY examples ./examples
USER hookbus
EXPOSE 8787
ENTRYPOINT ["hookbus"]
CMD ["gateway", "--host", "0.0.0.0", "--config", "/app/examples/policy.yaml"]
