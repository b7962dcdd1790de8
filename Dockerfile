# The production image: gunicorn serving the app; migrations run as a one-shot container (docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HOST=0.0.0.0 \
    PORT=8000

WORKDIR /app
COPY pyproject.toml README.md gunicorn.conf.py ./
COPY service ./service
COPY migrations ./migrations
# Editable, so that the service finds migrations/ beside its package exactly as in a checkout.
RUN pip install -e . && useradd --system --no-create-home planner
USER planner

EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
CMD ["gunicorn", "-c", "gunicorn.conf.py"]
