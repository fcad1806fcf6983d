"""Drives a channel's bucket through slipway's S3 gateway with boto3, as a tenant's Python code would.

Usage: boto3_client.py full|probe|read KEY|write KEY BODY|delete KEY|put-version KEY BODY|delete-version KEY VERSION|
versions PREFIX, with S3_ENDPOINT, S3_BUCKET, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY in the environment. With
SLIPWAY_RESOLVE=<host>=<ip> (and tests/s3/resolve on PYTHONPATH) the endpoint's host name is resolved to <ip> (the
public endpoint's name exists only in the test). Prints one line: "ok" (`read`: "ok " and the object's body;
`put-version` and `delete-version`: "ok " and the version's id; `versions`: "ok " and a JSON list of [key, version
id] pairs), or "error <status> <code>" for an S3 error. Any other failure raises, so the test sees the traceback.
"""

import hashlib
import io
import json
import os
import sys
import urllib.request

import boto3
import botocore.config
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

BUCKET = os.environ["S3_BUCKET"]
s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["S3_ENDPOINT"],
    aws_access_key_id=os.environ["S3_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["S3_SECRET_ACCESS_KEY"],
    region_name="us-east-1",
    config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


def full():
    s3.put_object(Bucket=BUCKET, Key="py/hello.txt", Body=b"hello v1")
    first = s3.head_object(Bucket=BUCKET, Key="py/hello.txt")["VersionId"]
    s3.put_object(Bucket=BUCKET, Key="py/hello.txt", Body=b"hello v2")
    expect(s3.get_object(Bucket=BUCKET, Key="py/hello.txt")["Body"].read() == b"hello v2", "latest version")
    old = s3.get_object(Bucket=BUCKET, Key="py/hello.txt", VersionId=first)["Body"].read()
    expect(old == b"hello v1", "read back by version id")
    versions = s3.list_object_versions(Bucket=BUCKET, Prefix="py/hello.txt")["Versions"]
    expect(len(versions) == 2, f"two versions listed, got {versions}")
    ranged = s3.get_object(Bucket=BUCKET, Key="py/hello.txt", Range="bytes=0-4")["Body"].read()
    expect(ranged == b"hello", "ranged get")

    # upload_fileobj goes multipart above the threshold: three parts of 5 MiB, 5 MiB and 2 MiB.
    data = os.urandom(12 * 1024 * 1024)
    config = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    s3.upload_fileobj(io.BytesIO(data), BUCKET, "py/big.bin", Config=config)
    out = io.BytesIO()
    s3.download_fileobj(BUCKET, "py/big.bin", out)
    expect(hashlib.sha256(out.getvalue()).digest() == hashlib.sha256(data).digest(), "multipart round trip")

    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "py/hello.txt"}, ExpiresIn=300)
    with urllib.request.urlopen(url) as res:
        expect(res.read() == b"hello v2", "presigned get")

    s3.copy_object(Bucket=BUCKET, Key="py/copy.txt", CopySource={"Bucket": BUCKET, "Key": "py/hello.txt"})
    expect(s3.get_object(Bucket=BUCKET, Key="py/copy.txt")["Body"].read() == b"hello v2", "copy")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="py/")["Contents"]]
    expect(listed == ["py/big.bin", "py/copy.txt", "py/hello.txt"], f"listing, got {listed}")
    deleted = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "py/copy.txt"}, {"Key": "py/big.bin"}]})
    expect(len(deleted.get("Deleted", [])) == 2, f"batch delete, got {deleted}")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="py/").get("Contents", [])]
    expect(listed == ["py/hello.txt"], f"listing after delete, got {listed}")

    try:
        s3.list_objects_v2(Bucket=BUCKET + "-other")
        raise AssertionError("a foreign bucket answered")
    except ClientError as e:
        expect(e.response["Error"]["Code"] == "NoSuchBucket", f"foreign bucket: {e.response}")
        expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 404, "foreign bucket is 404")
    print("ok")


def answer(call):
    """Runs call(): prints "ok" (and what it returns, if anything), or "error <status> <code>" for an S3 error."""
    try:
        out = call()
        print("ok" if out is None else "ok " + out)
    except ClientError as e:
        print(json.dumps(e.response.get("Error", {})), file=sys.stderr)
        print(f"error {e.response['ResponseMetadata']['HTTPStatusCode']} {e.response['Error'].get('Code', '')}")


def probe():
    def round_trip():
        s3.put_object(Bucket=BUCKET, Key="probe.txt", Body=b"through the edge")
        body = s3.get_object(Bucket=BUCKET, Key="probe.txt")["Body"].read()
        expect(body == b"through the edge", "probe round trip")

    answer(round_trip)


def read():
    answer(lambda: s3.get_object(Bucket=BUCKET, Key=sys.argv[2])["Body"].read().decode())


def write():
    answer(lambda: s3.put_object(Bucket=BUCKET, Key=sys.argv[2], Body=sys.argv[3].encode()) and None)


def delete():
    answer(lambda: s3.delete_object(Bucket=BUCKET, Key=sys.argv[2]) and None)


def put_version():
    answer(lambda: s3.put_object(Bucket=BUCKET, Key=sys.argv[2], Body=sys.argv[3].encode())["VersionId"])


def delete_version():
    answer(lambda: s3.delete_object(Bucket=BUCKET, Key=sys.argv[2], VersionId=sys.argv[3])["VersionId"])


def versions():
    def listed():
        found = s3.list_object_versions(Bucket=BUCKET, Prefix=sys.argv[2]).get("Versions", [])
        return json.dumps([[v["Key"], v["VersionId"]] for v in found])

    answer(listed)


{
    "full": full,
    "probe": probe,
    "read": read,
    "write": write,
    "delete": delete,
    "put-version": put_version,
    "delete-version": delete_version,
    "versions": versions,
}[sys.argv[1]]()
