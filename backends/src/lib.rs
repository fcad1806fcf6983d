//! The two systems that hold tenants' data, as the platform administers them with its own credentials: the data
//! server (a Postgres server with every channel's database) and the object store (an S3 backend with every
//! channel's bucket). The operator provisions and removes databases and buckets through them; the API server
//! measures, dumps and restores; the S3 gateway forwards tenants' requests to the object store. Tenants never see
//! these endpoints or their credentials. The flags that name them, which the operator and the API server share, are
//! [`args`].

pub mod args;
pub mod data_server;
pub mod object_store;
