# syntax=docker/dockerfile:1
# The MLflow tracking server image: MLflow at the project's pin plus the PostgreSQL driver
# (psycopg 3: SQLAlchemy 2.1, which MLflow 3.17 installs, reads the manifests' postgresql:// URI with
# psycopg, not psycopg2; the official MLflow image has neither), boto3 for the S3 artifact store and
# MLflow's auth extra (Flask-WTF) for its basic-auth app.
#   docker build -f k8s/docker/mlflow.Dockerfile -t itrlab-mlflow:3.17.2 k8s/docker
FROM python:3.11-slim-bookworm

# = the mlflow pin in pyproject.toml
ARG MLFLOW_VERSION=3.17.2

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --gid 10001 mlflow \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/mlflow --shell /usr/sbin/nologin mlflow

RUN pip install --no-cache-dir "mlflow[auth]==${MLFLOW_VERSION}" "psycopg[binary]==3.3.9" "boto3==1.44.5"

WORKDIR /home/mlflow
USER 10001:10001
EXPOSE 5000
CMD ["mlflow", "server", "--host", "0.0.0.0", "--port", "5000"]
