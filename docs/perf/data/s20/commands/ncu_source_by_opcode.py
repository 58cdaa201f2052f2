import csv,sys,collections,re
rows=list(csv.reader(open(sys.argv[1])))
# split per kernel
kern=None; hdr=None; data=collections.defaultdict(list)
for r in rows:
    if r and r[0]=="Kernel Name": kern=r[1]; hdr=None; continue
    if r and r[0]=="Address": hdr=r; continue
    if hdr and len(r)==len(hdr): data[kern].append(dict(zip(hdr,r)))
def f(x):
    try: return float(x.replace(',',''))
    except: return 0.0
for k,rs in data.items():
    print("==",k[:110])
    stalls=[h for h in rs[0].keys() if h.startswith("stall_") and "Not Issued" not in h]
    tot_s=sum(f(r["Warp Stall Sampling (All Samples)"]) for r in rs)
    tot_i=sum(f(r["Instructions Executed"]) for r in rs)
    print("samples",tot_s,"instr",tot_i)
    st={s:sum(f(r[s]) for r in rs) for s in stalls}
    print(" ".join(f"{s[6:]}={v/tot_s*100:.1f}%" for s,v in sorted(st.items(),key=lambda x:-x[1])[:10]))
    byop=collections.defaultdict(lambda:[0,0,0])
    for r in rs:
        op=r["Source"].split()[0] if r["Source"].split() else "?"
        if op.startswith("@"): op=r["Source"].split()[1]
        op=op.split('.')[0]
        byop[op][0]+=f(r["Instructions Executed"]); byop[op][1]+=f(r["Warp Stall Sampling (All Samples)"]); byop[op][2]+=f(r["L1 Wavefronts Shared Excessive"])
    for op,(i,s,x) in sorted(byop.items(),key=lambda kv:-kv[1][1])[:16]:
        print(f"  {op:12s} instr {i/tot_i*100:5.1f}%  samples {s/tot_s*100:5.1f}%  shexcess {x:.0f}")
    # top instructions by samples
    top=sorted(rs,key=lambda r:-f(r["Warp Stall Sampling (All Samples)"]))[:14]
    for r in top:
        s=f(r["Warp Stall Sampling (All Samples)"])
        main=max(stalls,key=lambda h:f(r[h]))
        print(f"   {s/tot_s*100:5.1f}% {main[6:]:12s} {r['Source'][:70]}")
