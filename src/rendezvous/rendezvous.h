// The door of src/rendezvous, how ranks find each other: the unique id
// (uniqueid.h), TCP helpers and addresses (socket.h), and the bootstrap
// network of control sockets with PeerInfo for every rank (bootstrap.h).
// Outside src/rendezvous include only this header (tools/layers.txt).
#pragma once
#include "rendezvous/bootstrap.h"
#include "rendezvous/socket.h"
#include "rendezvous/uniqueid.h"
